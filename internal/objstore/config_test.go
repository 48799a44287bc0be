package objstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/objstore"
)

func TestNewS3RejectsBadConfig(t *testing.T) {
	good := objstore.Config{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", Bucket: "snapshots", AccessKey: "a", SecretKey: "s", PathStyle: true}
	tests := []struct {
		name   string
		mutate func(*objstore.Config)
		field  string
	}{
		{"no bucket", func(c *objstore.Config) { c.Bucket = "" }, "Bucket"},
		{"upper-case bucket", func(c *objstore.Config) { c.Bucket = "Snapshots" }, "Bucket"},
		{"short bucket", func(c *objstore.Config) { c.Bucket = "ab" }, "Bucket"},
		{"endpoint without scheme", func(c *objstore.Config) { c.Endpoint = "127.0.0.1:9000" }, "Endpoint"},
		{"endpoint ftp", func(c *objstore.Config) { c.Endpoint = "ftp://host" }, "Endpoint"},
		{"endpoint without host", func(c *objstore.Config) { c.Endpoint = "http://" }, "Endpoint"},
		{"endpoint with query", func(c *objstore.Config) { c.Endpoint = "http://host/?x=1" }, "Endpoint"},
		{"access without secret", func(c *objstore.Config) { c.SecretKey = "" }, "SecretKey"},
		{"secret without access", func(c *objstore.Config) { c.AccessKey = "" }, "AccessKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			_, err := objstore.NewS3(context.Background(), cfg, nil)
			if !errors.Is(err, objstore.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name field %s", err, tt.field)
			}
		})
	}

	t.Run("every problem at once", func(t *testing.T) {
		_, err := objstore.NewS3(context.Background(), objstore.Config{Endpoint: "nope", AccessKey: "a"}, nil)
		for _, field := range []string{"Bucket", "Endpoint", "SecretKey"} {
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("error %v does not name field %s", err, field)
			}
		}
	})

	t.Run("good config makes no request", func(t *testing.T) {
		if _, err := objstore.NewS3(context.Background(), good, nil); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	})
}

func TestS3RejectsBadKeys(t *testing.T) {
	// Port 9 (discard) is never dialled: keys are checked first.
	st, err := objstore.NewS3(context.Background(), objstore.Config{Endpoint: "http://127.0.0.1:9", Region: "us-east-1", Bucket: "snapshots", AccessKey: "a", SecretKey: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"", "/abs", strings.Repeat("k", 1025)} {
		if err := st.Put(ctx, key, strings.NewReader("x"), 1); err == nil {
			t.Errorf("put %.10q: got nil, want error", key)
		}
		if _, err := st.Get(ctx, key); err == nil {
			t.Errorf("get %.10q: got nil, want error", key)
		}
		if _, err := st.Stat(ctx, key); err == nil {
			t.Errorf("stat %.10q: got nil, want error", key)
		}
		if err := st.Delete(ctx, key); err == nil {
			t.Errorf("delete %.10q: got nil, want error", key)
		}
	}
	if err := st.Put(ctx, "k", io.LimitReader(nil, 0), -1); err == nil {
		t.Error("put with negative size: got nil, want error")
	}
}
