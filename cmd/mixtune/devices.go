package main

import (
	"context"
	"fmt"
	"io"

	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/train"
)

func cmdDevices(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("devices", "devices [-c CONFIG [--ranks N]] [--json]", stderr)
	cfg := fs.String("c", "", "a recipe: mark the device it would pick, and why")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	ranks := fs.Int("ranks", 1, "with -c: the ranks of a data-parallel job on this host; say which GPU each takes")
	var sets multi
	fs.Var(&sets, "set", "override one config field (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	inv := device.Discover(context.Background())
	var sel *device.Selection
	var assignment []string
	policy := device.PolicyTotal
	if *ranks < 1 {
		return usageError{fmt.Sprintf("--ranks %d: must be at least 1", *ranks)}
	}
	if *cfg != "" {
		r, err := train.Load(*cfg, sets)
		if err != nil {
			return err
		}
		policy = device.Policy(r.DevicePolicy)
		s, err := r.SelectDevices(inv, *ranks)
		if err != nil {
			// show what exists, then the refusal
			if werr := device.Write(stdout, inv, nil, policy); werr != nil {
				return werr
			}
			return err
		}
		sel = &s
		if *ranks > 1 {
			if assignment, err = r.RankAssignment(s, *ranks); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		return device.WriteJSON(stdout, inv, sel, policy)
	}
	if err := device.Write(stdout, inv, sel, policy); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	for _, l := range assignment {
		fmt.Fprintln(stdout, l)
	}
	return nil
}
