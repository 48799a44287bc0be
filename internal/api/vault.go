package api

import (
	"context"
	"errors"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// vaultService keeps the caller's secrets. Values go in and never come back: no answer carries
// one, and vault errors never contain one, so neither the client nor the log sees it.
type vaultService struct {
	cbv1.UnimplementedVaultServiceServer
	s *Server
}

func (v *vaultService) caller(ctx context.Context) (*vault.Vault, string, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, "", err
	}
	if v.s.vault == nil {
		return nil, "", cocoonbox.Errorf(cocoonbox.EUnavailable, "this server keeps no secrets")
	}
	return v.s.vault, p.User.ID, nil
}

// SetSecret stores a secret for the caller, replacing any with the same name.
func (v *vaultService) SetSecret(ctx context.Context, req *cbv1.SetSecretRequest) (*cbv1.Secret, error) {
	vlt, caller, err := v.caller(ctx)
	if err != nil {
		return nil, err
	}
	info, err := vlt.Set(ctx, caller, req.GetName(), req.GetValue())
	if err != nil {
		return nil, err
	}
	v.s.audit(ctx, caller, "vault.set", map[string]any{"name": info.Name})
	return secretProto(info), nil
}

// ListSecrets lists the caller's secrets without values.
func (v *vaultService) ListSecrets(ctx context.Context, _ *cbv1.ListSecretsRequest) (*cbv1.ListSecretsResponse, error) {
	vlt, caller, err := v.caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := vlt.List(ctx, caller)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListSecretsResponse{Secrets: protoList(list, secretProto)}, nil
}

// DeleteSecret removes one of the caller's secrets.
func (v *vaultService) DeleteSecret(ctx context.Context, req *cbv1.DeleteSecretRequest) (*cbv1.DeleteSecretResponse, error) {
	vlt, caller, err := v.caller(ctx)
	if err != nil {
		return nil, err
	}
	err = vlt.Delete(ctx, caller, req.GetName())
	if errors.Is(err, store.ErrNotFound) {
		return nil, cocoonbox.Errorf(cocoonbox.ENotFound, "name: you have no secret %q", req.GetName())
	}
	if err != nil {
		return nil, err
	}
	v.s.audit(ctx, caller, "vault.delete", map[string]any{"name": req.GetName()})
	return &cbv1.DeleteSecretResponse{}, nil
}
