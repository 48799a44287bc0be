package main

import (
	"context"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// The desktop's control lease from the command line: take it before driving the desktop from a
// viewer of your own (the web app takes it with its Take over button), give it back so the
// box's agent may drive again.

func boxTakeOverCommand() *cli.Command {
	cmd := boxStateCommand("takeover", "take the box's desktop control lease: you drive, the agent's desktop input waits", "taking over",
		func(ctx context.Context, boxes cbv1.BoxServiceClient, box string) (*cbv1.Box, error) {
			return boxes.TakeOver(ctx, &cbv1.TakeOverRequest{Box: box})
		})
	cmd.Description = "Needs the driver role. While someone else holds the lease you are refused, unless you are\n" +
		"the box's owner or an admin, who take it from them. The box releases a lease whose holder has\n" +
		"no control connection open (cocoonbox desktop --control, the web app driving) for its lease\n" +
		"idle, 2m by default, counted from the takeover: connect within it. cocoonbox box handback\n" +
		"gives the lease back."
	return cmd
}

func boxHandBackCommand() *cli.Command {
	cmd := boxStateCommand("handback", "give the box's desktop control lease back, so the agent may drive again", "handing back",
		func(ctx context.Context, boxes cbv1.BoxServiceClient, box string) (*cbv1.Box, error) {
			return boxes.HandBack(ctx, &cbv1.HandBackRequest{Box: box})
		})
	cmd.Description = "Ends your lease; the box's owner or an admin may end anyone's. Handing back a desktop nobody\n" +
		"controls does nothing. The agent's runs waiting for the desktop go on at once."
	return cmd
}
