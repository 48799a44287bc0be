package devstack

import (
	"context"
	"errors"
	"fmt"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Bootstrap says what the dev stack did to give its person a working CLI.
type Bootstrap struct {
	CreatedUser  bool   // the first user was created on this start
	CreatedToken bool   // a new token was minted and written to the CLI config
	UserName     string // the dev user
	CLIConfig    string // where the CLI config lives
}

// bootstrap makes sure the dev user exists and that the CLI config holds a working token for the
// API at endpoint. A token already in the CLI config is kept while it still works, so restarts
// never invalidate a person's scripts.
func bootstrap(ctx context.Context, st *store.Store, cfg config.Dev, endpoint string) (Bootstrap, error) {
	b := Bootstrap{UserName: cfg.User, CLIConfig: cfg.CLIConfig}
	cli, err := config.LoadCLI(cfg.CLIConfig, config.MapEnv(nil))
	if err != nil {
		return b, fmt.Errorf("cli config: %w", err)
	}
	user, err := st.UserByName(ctx, cfg.User)
	if errors.Is(err, store.ErrNotFound) {
		user, err = st.CreateUser(ctx, store.NewUser{Name: cfg.User, Admin: true})
		b.CreatedUser = err == nil
	}
	if err != nil {
		return b, fmt.Errorf("dev user %s: %w", cfg.User, err)
	}
	if cli.Token != "" {
		u, _, err := st.UserByTokenHash(ctx, store.HashToken(cli.Token))
		if err == nil && u.ID == user.ID {
			if cli.Endpoint != endpoint { // the API moved (a different --listen): follow it
				cli.Endpoint = endpoint
				if err := config.WriteCLI(cfg.CLIConfig, cli); err != nil {
					return b, err
				}
			}
			return b, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return b, fmt.Errorf("check cli token: %w", err)
		}
	}
	token, err := store.NewToken()
	if err != nil {
		return b, err
	}
	if _, err := st.CreateToken(ctx, user.ID, "dev", store.HashToken(token)); err != nil {
		return b, fmt.Errorf("create dev token: %w", err)
	}
	if err := config.WriteCLI(cfg.CLIConfig, config.CLI{Endpoint: endpoint, Token: token}); err != nil {
		return b, err
	}
	b.CreatedToken = true
	return b, nil
}
