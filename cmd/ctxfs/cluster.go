package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/cluster/ca"
)

// defaultClusterDir is where a host keeps its cluster identity: the CA's
// certificate, its own certificate and key (and, on the host that ran
// init, the CA key).
const defaultClusterDir = "/etc/ctxfs/cluster"

// newClusterCommand is `ctxfs cluster …`: the certificates hosts prove
// themselves to each other with (package cluster/ca). Subcommands that
// report on a running cluster (status) are added here too.
func newClusterCommand() *cobra.Command {
	cluster := &cobra.Command{
		Use:   "cluster",
		Short: "The hosts that serve one store together: certificates (init, join, revoke), status",
		Long: `Cluster groups the commands on the hosts that serve one store together
(ctxfs mount --cluster). Hosts talk to each other over TLS 1.3, each proving
itself with a certificate of the cluster's own CA, and trust nothing else.
"init" makes the CA and the first host's certificate; "join", run where the
CA is, makes another host's, to copy to that host; "revoke", run there too,
cuts a host off.`,
		Example: `  ctxfs cluster init --host alpha --addr 10.0.0.1
  ctxfs cluster join --host beta --addr 10.0.0.2 --out /root/beta-cluster`,
		Args: unknownSubcommand,
		RunE: missingSubcommand,
	}
	cluster.SuggestionsMinimumDistance = 2
	cluster.AddCommand(newClusterInitCommand(), newClusterJoinCommand(), newClusterRevokeCommand(), newClusterStatusCommand())
	return cluster
}

// newClusterInitCommand is `ctxfs cluster init [--dir DIR] [--host NAME]
// --addr A[,A…]`.
func newClusterInitCommand() *cobra.Command {
	var dir, host string
	var addrs []string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make the cluster's CA and this host's certificate",
		Long: `Init makes the cluster's certificate authority and this host's certificate
in --dir (made 0700 when missing; its files are 0600). The CA key stays in
that directory: run "ctxfs cluster join" here for every other host. A
directory that already holds a cluster's files is refused (exit 1): keys are
never replaced. So is one that another user could change, or a directory
above it.`,
		Example: `  ctxfs cluster init --host alpha --addr 10.0.0.1,alpha.example.net`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(addrs) == 0 {
				return usageError("cluster init: give --addr, the addresses other hosts reach this one at")
			}
			if err := ca.Init(dir, host, addrs); err != nil {
				return err
			}
			fmt.Printf("ctxfs: cluster CA and host %s's certificate made in %s\n", host, dir)
			fmt.Printf("The CA key (%s) never leaves this host: make the other hosts' certificates here with\n  ctxfs cluster join --ca %s --host NAME --addr ADDR --out DIR\n",
				filepath.Join(dir, ca.CAKeyFile), dir)
			return nil
		},
	}
	hostName, _ := os.Hostname()
	cmd.Flags().StringVar(&dir, "dir", defaultClusterDir, "the `DIR` to make the CA and this host's certificate in")
	cmd.Flags().StringVar(&host, "host", hostName, "this host's `NAME` in the cluster")
	cmd.Flags().StringSliceVar(&addrs, "addr", nil, "the `ADDRESSES` (IPs or DNS names, comma-separated) other hosts reach this one at")
	return cmd
}

// newClusterJoinCommand is `ctxfs cluster join [--ca DIR] --host NAME
// --addr A[,A…] --out DIR`, run where the CA is.
func newClusterJoinCommand() *cobra.Command {
	var caDir, host, out string
	var addrs []string
	var etcd bool
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Make another host's certificate, signed by the cluster's CA",
		Long: `Join makes a certificate for host --host, signed by the CA in --ca, and
writes it with its key and the CA's certificate (never the CA key) to --out
(made 0700 when missing; its files are 0600). Run it where the CA is, then
copy --out to that host as its cluster directory, and remove it here: it
holds that host's key. An --out that already holds a host's files is refused
(exit 1). With --etcd the certificate is an etcd server's: the hosts reach
etcd with it verified, and none takes it as a host's (its key lives with
the etcd daemon, and must not speak for anyone's uid).`,
		Example: `  ctxfs cluster join --host beta --addr 10.0.0.2 --out /root/beta-cluster`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case host == "":
				return usageError("cluster join: give --host, the new host's name")
			case len(addrs) == 0:
				return usageError("cluster join: give --addr, the addresses other hosts reach the new one at")
			case out == "":
				return usageError("cluster join: give --out, the directory to write the new host's files to")
			}
			issue := ca.Issue
			if etcd {
				issue = ca.IssueEtcd
			}
			if err := issue(caDir, host, addrs, out); err != nil {
				return err
			}
			fmt.Printf("ctxfs: host %s's certificate made in %s (%s, %s, %s)\n", host, out, ca.CACertFile, ca.HostCertFile, ca.HostKeyFile)
			fmt.Printf("Copy it to %s as its cluster directory, owned by root, 0700, its files 0600, e.g.\n  scp -rp %s root@%s:%s\nthen remove %s here: it holds %s's key.\n",
				host, out, host, defaultClusterDir, out, host)
			return nil
		},
	}
	cmd.Flags().StringVar(&caDir, "ca", defaultClusterDir, "the `DIR` of the cluster's CA (where init ran)")
	cmd.Flags().StringVar(&host, "host", "", "the new host's `NAME`")
	cmd.Flags().StringSliceVar(&addrs, "addr", nil, "the new host's `ADDRESSES` (IPs or DNS names, comma-separated)")
	cmd.Flags().StringVar(&out, "out", "", "the `DIR` to write the new host's files to")
	cmd.Flags().BoolVar(&etcd, "etcd", false, "make an etcd server's certificate, not a host's")
	return cmd
}
