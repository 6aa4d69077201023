package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/lease"
)

// newClusterRevokeCommand is `ctxfs cluster revoke [--ca DIR] [--host
// NAME]… [--cert FILE]… [--cluster ENDPOINTS]`, run where the CA is.
func newClusterRevokeCommand() *cobra.Command {
	var caDir, name string
	var etcd etcdFlags
	var hosts, certs []string
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Cut a host off: revoke its certificates, and hand the list to every host",
		Long: `Revoke adds to the cluster's certificate revocation list every certificate
the CA in --ca issued to each --host (the CA keeps a copy of each in its
issued/ directory), and each certificate file --cert (one issued before the
CA kept copies), signs the list with the CA key and a number one higher, and
writes it to --ca/revoked.crl. With --cluster it also puts the list in etcd,
where every running host watches for it: within a second each refuses the
revoked host as a peer, both ways (EACCES), and closes the connections it
held from it. A host adopts a list only when the cluster CA signed it and it
is newer than the one it holds, so whoever can write etcd can neither forge
nor undo one; a host that starts while etcd is away reads the copy in its
own cluster directory (revoked.crl, 0600) if the admin put one there.

A revoked host can still write the shared store if it still mounts it, and
etcd if etcd lets it in: run etcd over TLS with the CA's revoked.crl as its
--client-crl-file (docs/cluster.md), and take the store's exports away.
To let the host back, make it a new certificate (ctxfs cluster join). With
no --host or --cert, the list as it is is put in etcd again.`,
		Example: `  ctxfs cluster revoke --host beta --cluster http://etcd1:2379,http://etcd2:2379`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(hosts) == 0 && len(certs) == 0 && etcd.endpoints == "" {
				return usageError("cluster revoke: give --host or --cert (what to revoke), or --cluster to hand the list out again")
			}
			etcd.certs = caDir // the host certificate init made there is what etcd is shown
			return clusterRevoke(cmd.OutOrStdout(), caDir, hosts, certs, etcd, name)
		},
	}
	cmd.Flags().StringVar(&caDir, "ca", defaultClusterDir, "the `DIR` of the cluster's CA (where init ran)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "revoke every certificate issued to the host `NAMES` (comma-separated or repeated)")
	cmd.Flags().StringSliceVar(&certs, "cert", nil, "revoke the certificate in each `FILE`")
	cmd.Flags().StringVar(&etcd.endpoints, "cluster", "", "etcd's client `ENDPOINTS`, comma-separated: put the list where the hosts watch for it")
	cmd.Flags().StringVar(&etcd.etcdCA, "etcd-ca", "", "with https endpoints: the `FILE` of the CA that signed etcd's certificates (default: the cluster CA)")
	cmd.Flags().StringVar(&name, "cluster-name", "ctxfs", "the store's `NAME` in etcd (as given to ctxfs mount --cluster-name)")
	return cmd
}

func clusterRevoke(w io.Writer, caDir string, hosts, certs []string, etcd etcdFlags, name string) error {
	crl, added, err := ca.Revoke(caDir, hosts, certs)
	if err != nil {
		return err
	}
	file := filepath.Join(caDir, ca.CRLFile)
	if len(added) == 0 {
		fmt.Fprintf(w, "ctxfs: nothing new to revoke; the list is %s\n", file)
	} else {
		fmt.Fprintf(w, "ctxfs: %s revoked; the list is %s\n", certificates(len(added)), file)
		for _, s := range added {
			fmt.Fprintf(w, "  serial %s\n", s.Text(16))
		}
	}
	if etcd.endpoints == "" {
		fmt.Fprintf(w, "Hand it to the running hosts: ctxfs cluster revoke --ca %s --cluster ENDPOINTS\n", caDir)
		return nil
	}
	return etcd.observe(name, func(ctx context.Context, m *lease.Member) error {
		if err := m.PublishCRL(ctx, crl); err != nil {
			fmt.Fprintf(os.Stderr, "ctxfs: cluster revoke: the list is written, not handed out: %v\n"+
				"Run ctxfs cluster revoke --ca %s --cluster %s once etcd answers.\n", err, caDir, etcd.endpoints)
			return exitStatus(exUnavailable)
		}
		fmt.Fprintf(w, "ctxfs: the list is in etcd (%s): the running hosts adopt it within a second\n", clusterPrefix(name)+"crl")
		return nil
	})
}

// certificates is "1 certificate", "2 certificates".
func certificates(n int) string {
	if n == 1 {
		return "1 certificate"
	}
	return fmt.Sprintf("%d certificates", n)
}

// describeCRL says what a list in etcd is: its number and how many
// certificates it names (its signature is each host's to check).
func describeCRL(crl string) string {
	der := []byte(crl)
	if block, _ := pem.Decode(der); block != nil {
		der = block.Bytes
	}
	l, err := x509.ParseRevocationList(der)
	if err != nil || l.Number == nil {
		return "unreadable (the hosts refuse it)"
	}
	return fmt.Sprintf("number %s, %s, signed %s", l.Number, certificates(len(l.RevokedCertificateEntries)), l.ThisUpdate.UTC().Format(time.RFC3339))
}
