package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/cluster/lease"
)

// statusPatience bounds `ctxfs cluster status`: an etcd that does not
// answer is reported, not waited for.
const statusPatience = 5 * time.Second

// newClusterStatusCommand is `ctxfs cluster status --cluster ENDPOINTS`.
func newClusterStatusCommand() *cobra.Command {
	var etcd etcdFlags
	var name string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the hosts of a cluster, who writes the store, and etcd's health",
		Long: `Status reads the cluster's state from etcd (it needs no mount and joins
nothing): each etcd endpoint's health, the hosts that serve the store (name,
address, pid, lease left, the number of the revocation list each holds),
the writer with its fencing token, and the list in etcd. Exit 0
when etcd answered and a host writes; 1 when etcd answered but no host
writes the store now (writes are EAGAIN until one takes over); 69
(EX_UNAVAILABLE) when etcd has no quorum.`,
		Example: `  ctxfs cluster status --cluster http://etcd1:2379,http://etcd2:2379,http://etcd3:2379`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if etcd.endpoints == "" {
				return usageError("cluster status: give --cluster ENDPOINTS (etcd's client URLs)")
			}
			return clusterStatus(cmd.OutOrStdout(), etcd, name)
		},
	}
	cmd.Flags().StringVar(&etcd.endpoints, "cluster", "", "etcd's client `ENDPOINTS`, comma-separated")
	etcd.addTLSFlags(cmd.Flags(), "with https endpoints: the cluster certificate `DIR` whose host certificate is shown to etcd")
	cmd.Flags().StringVar(&name, "cluster-name", "ctxfs", "the store's `NAME` in etcd (as given to ctxfs mount --cluster-name)")
	return cmd
}

func clusterStatus(w io.Writer, etcd etcdFlags, name string) error {
	return etcd.observe(name, func(ctx context.Context, m *lease.Member) error {
		st, err := m.Status(ctx)
		printEtcd(w, st.Endpoints)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ctxfs: cluster status: %v\n", err)
			return exitStatus(exUnavailable)
		}
		fmt.Fprintln(w)
		printHosts(w, st)
		if crl, err := m.CRL(ctx); err == nil && crl != "" {
			fmt.Fprintf(w, "\nrevocation list in etcd: %s\n", describeCRL(crl))
		}
		if st.Writer.Host == "" {
			fmt.Fprintln(w, "\nno host writes the store now: writes are EAGAIN until one takes over")
			return exitStatus(1)
		}
		fmt.Fprintf(w, "\nwriter: %s at %s, token %d (every session of the store)\n", st.Writer.Host, st.Writer.Addr, st.Writer.Token)
		return nil
	})
}

// printEtcd is the table of etcd's members as each answered.
func printEtcd(w io.Writer, endpoints []lease.EndpointStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ETCD\tVERSION\tLEADER\tRAFT INDEX\tHEALTH")
	for _, ep := range endpoints {
		health := "ok"
		if ep.Err != nil {
			health = ep.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%x\t%d\t%s\n", ep.Endpoint, dash(ep.Version), ep.Leader, ep.RaftIndex, health)
	}
	tw.Flush()
}

// printHosts is the table of the hosts registered, the writer marked.
func printHosts(w io.Writer, st lease.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tPID\tLEASE LEFT\tCRL\tROLE")
	for _, h := range st.Hosts {
		role := "follower"
		if h.Name == st.Writer.Host {
			role = fmt.Sprintf("writer (token %d)", st.Writer.Token)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", h.Name, h.Addr, h.PID, h.TTLLeft, dash(h.CRL), role)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// exUnavailable is sysexits' EX_UNAVAILABLE: etcd has no quorum.
const exUnavailable = 69
