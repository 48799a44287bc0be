package main

import (
	"context"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// boxCommand groups the commands on boxes. Every one names its box by ID or by name; names are
// resolved by the API, so they are passed on as typed.
func boxCommand() *cli.Command {
	return &cli.Command{
		Name:  "box",
		Usage: "create, list, drive and share boxes",
		Subcommands: []*cli.Command{
			boxCreateCommand(),
			boxLsCommand(),
			boxShowCommand(),
			boxWakeCommand(),
			boxHibernateCommand(),
			boxSnapshotCommand(),
			boxSnapshotsCommand(),
			boxRestoreCommand(),
			boxRecreateCommand(),
			boxForkCommand(),
			boxRmCommand(),
			boxExecCommand(),
			boxShellCommand(),
			boxCpCommand(),
			boxPortCommand(),
			boxPortsCommand(),
			boxNetworkCommand(),
			boxTakeOverCommand(),
			boxHandBackCommand(),
			boxPolicyCommand(),
			boxEventsCommand(),
			boxRecordingsCommand(),
			boxShareCommand(),
			boxUnshareCommand(),
			boxSharesCommand(),
		},
		Action: groupAction,
	}
}

// boxClient opens a session for a box command.
func boxClient(c *cli.Context) (*session, cbv1.BoxServiceClient, error) {
	s, err := open(c)
	if err != nil {
		return nil, nil, err
	}
	return s, cbv1.NewBoxServiceClient(s.conn), nil
}

// boxIDOf is the ID of the box ref names: ref itself when it is an ID, else the ID of the
// caller's box of that name, asked of the API.
func boxIDOf(ctx context.Context, boxes cbv1.BoxServiceClient, ref string) (cocoonbox.BoxID, error) {
	if strings.HasPrefix(ref, "bx_") {
		return cocoonbox.BoxID(ref), nil
	}
	b, err := boxes.GetBox(ctx, &cbv1.GetBoxRequest{Box: ref})
	if err != nil {
		return "", apiError(err)
	}
	return cocoonbox.BoxID(b.GetId()), nil
}

// accountClient is boxClient for the account service (tokens, webhooks).
func accountClient(c *cli.Context) (*session, cbv1.AccountServiceClient, error) {
	s, err := open(c)
	if err != nil {
		return nil, nil, err
	}
	return s, cbv1.NewAccountServiceClient(s.conn), nil
}
