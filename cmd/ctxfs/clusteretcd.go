package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/lease"
)

// etcdFlags are how a command reaches etcd: its endpoints, and for https
// ones the CA that signed etcd's certificates (the cluster CA unless
// given) and the cluster certificate directory whose host certificate
// this process presents (etcd run with --client-cert-auth).
type etcdFlags struct {
	endpoints string
	certs     string
	etcdCA    string
}

func (f *etcdFlags) addTLSFlags(fs *pflag.FlagSet, certsHelp string) {
	fs.StringVar(&f.certs, "cluster-certs", defaultClusterDir, certsHelp)
	fs.StringVar(&f.etcdCA, "etcd-ca", "", "with https endpoints: the `FILE` of the CA that signed etcd's certificates (default: the cluster CA)")
}

func (f *etcdFlags) list() []string { return strings.Split(f.endpoints, ",") }

// https says whether f's endpoints are https ones; endpoints of both
// kinds, or --etcd-ca without https, are a usage error: one etcd cluster
// speaks one.
func (f *etcdFlags) https() (bool, error) {
	n := 0
	for _, ep := range f.list() {
		if strings.HasPrefix(ep, "https://") {
			n++
		}
	}
	switch {
	case n == 0 && f.etcdCA != "":
		return false, usageError("--etcd-ca needs https endpoints")
	case n != 0 && n != len(f.list()):
		return false, usageError("--cluster " + f.endpoints + ": all https or none")
	}
	return n > 0, nil
}

// tlsFor is the TLS configuration for f's endpoints: nil for http ones;
// for https ones, id's certificate (loaded from f.certs when id is nil)
// offered, etcd's verified against f.etcdCA or the cluster CA.
func (f *etcdFlags) tlsFor(id *ca.Identity) (*tls.Config, error) {
	if https, err := f.https(); !https || err != nil {
		return nil, err
	}
	if id == nil {
		var err error
		if id, err = ca.Load(f.certs); err != nil {
			return nil, err
		}
	}
	var pool *x509.CertPool
	if f.etcdCA != "" {
		var err error
		if pool, err = ca.LoadPool(f.etcdCA); err != nil {
			return nil, err
		}
	}
	return id.EtcdTLS(pool), nil
}

// observe joins etcd as an observer of the store name (nothing
// registered) and calls do with it and a context bounded by
// statusPatience: what `ctxfs cluster status` and `revoke` read and
// write etcd through.
func (f *etcdFlags) observe(name string, do func(context.Context, *lease.Member) error) error {
	etcdTLS, err := f.tlsFor(nil)
	if err != nil {
		return err
	}
	m, err := lease.Observe(lease.Config{Endpoints: f.list(), Prefix: clusterPrefix(name), TLS: etcdTLS})
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), statusPatience)
	defer cancel()
	return do(ctx, m)
}
