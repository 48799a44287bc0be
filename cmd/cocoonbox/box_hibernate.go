package main

import (
	"context"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxHibernateCommand() *cli.Command {
	return boxStateCommand("hibernate", "free a box's CPU and memory, keeping its state", "hibernating",
		func(ctx context.Context, boxes cbv1.BoxServiceClient, box string) (*cbv1.Box, error) {
			return boxes.HibernateBox(ctx, &cbv1.HibernateBoxRequest{Box: box, RequestId: requestID()})
		})
}
