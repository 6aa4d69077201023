package lease

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The cluster's certificate revocation list is handed out through etcd
// (Prefix+"crl"): `ctxfs cluster revoke` puts it, every host watches it.
// etcd is only the carrier: a host adopts a list only when the cluster
// CA signed it and it is newer than the one it holds (cluster/ca), so
// whoever can write etcd can neither forge a list nor bring an old one
// back; deleting the key changes nothing a host holds.

func (m *Member) crlKey() string { return m.cfg.Prefix + "crl" }

// PublishCRL puts crl (PEM, as cluster/ca signed it) where the hosts
// watch for it.
func (m *Member) PublishCRL(ctx context.Context, crl []byte) error {
	bctx, cancel := m.bounded(ctx)
	defer cancel()
	if _, err := m.client.Put(bctx, m.crlKey(), string(crl)); err != nil {
		return callError(ctx, "publish crl", err)
	}
	return nil
}

// CRL is the list in etcd now ("" when none).
func (m *Member) CRL(ctx context.Context) (string, error) {
	resp, err := m.get(ctx, "crl", m.crlKey())
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

// WatchCRL sends the list in etcd, then each new one, until ctx ends (as
// WatchWriter; "" when there is none, or it was deleted: a host ignores
// that, keeping the list it holds).
func (m *Member) WatchCRL(ctx context.Context) <-chan string {
	return watchValue(ctx, m, m.crlKey(), func(kv *mvccpb.KeyValue) string {
		if kv == nil {
			return ""
		}
		return string(kv.Value)
	})
}
