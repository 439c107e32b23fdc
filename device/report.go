package device

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Write prints the inventory as a table ranked by policy, the way
// `mixtune devices` shows it: rank, nvidia-smi index, name, total and free
// memory, compute capability, utilisation, MIG mode, UUID and PCI bus id.
// With a selection, the chosen device is marked with "*" and followed by
// why, the precision, where compute runs, the warnings and the child
// environment. sel may be nil.
func Write(w io.Writer, inv Inventory, sel *Selection, policy Policy) error {
	policy = reportPolicy(policy)
	chosen := chosenSet(sel)
	var b strings.Builder
	switch {
	case len(inv.GPUs) == 0 && inv.Note == "":
		fmt.Fprintf(&b, "no GPU found, using CPU (source: %s)\n", inv.Source)
	case len(inv.GPUs) == 0:
		// The note already begins "no GPU found, using CPU".
	default:
		fmt.Fprintf(&b, "GPUs found through %s, ranked by %s:\n", inv.Source, policy.describe())
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\tRANK\tINDEX\tNAME\tTOTAL\tFREE\tCC\tUTIL\tMIG\tUUID\tPCI BUS ID")
		for r, g := range Rank(inv.GPUs, policy) {
			writeRow(tw, chosen, fmt.Sprint(r+1), g.Name, g)
			for _, m := range g.MIGDevices {
				writeRow(tw, chosen, "", "- "+m.Name, m)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if inv.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", inv.Note)
	}
	if sel != nil {
		target := "CPU"
		if !sel.CPU {
			target = labels(sel.GPUs)
		}
		fmt.Fprintf(&b, "\nselected: %s\n", target)
		fmt.Fprintf(&b, "why: %s\n", sel.Reason)
		p := sel.Precision.String()
		if sel.LossScaling {
			p += " with loss scaling"
		}
		fmt.Fprintf(&b, "precision: %s\n", p)
		fmt.Fprintf(&b, "compute: %s\n", sel.Compute)
		for _, warn := range sel.Warnings {
			fmt.Fprintf(&b, "warning: %s\n", warn)
		}
		fmt.Fprintf(&b, "child env: %s\n", strings.Join(sel.Env, " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(tw io.Writer, chosen map[string]bool, rank, name string, g GPU) {
	mark := ""
	if chosen[strings.ToLower(g.UUID)] {
		mark = "*"
	}
	total, free := "?", "?"
	if g.MemoryTotal > 0 {
		total, free = formatBytes(g.MemoryTotal), formatBytes(g.MemoryFree)
	}
	util := "?"
	if g.UtilizationGPU >= 0 {
		util = fmt.Sprintf("%d%%", g.UtilizationGPU)
	}
	mig := g.MIGMode
	switch {
	case g.IsMIG():
		mig = "instance"
	case mig == "":
		mig = "-"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
		mark, rank, g.Index, name, total, free, g.computeCapability(), util, mig, g.UUID, g.PCIBusID)
}

func chosenSet(sel *Selection) map[string]bool {
	m := map[string]bool{}
	if sel != nil {
		for _, g := range sel.GPUs {
			m[strings.ToLower(g.UUID)] = true
		}
	}
	return m
}

func reportPolicy(p Policy) Policy {
	if q, err := ParsePolicy(string(p)); err == nil {
		return q
	}
	return PolicyTotal
}

// Report is the JSON document WriteJSON writes. Its field names are stable:
// scripts read them.
type Report struct {
	Source string `json:"source"`
	Note   string `json:"note"`
	Policy Policy `json:"policy"`
	// Devices are ranked by Policy, best first.
	Devices []ReportDevice `json:"devices"`
	// Selection is null when no config was given.
	Selection *Selection `json:"selection"`
}

// ReportDevice is one ranked GPU.
type ReportDevice struct {
	Rank   int  `json:"rank"`
	Chosen bool `json:"chosen"`
	GPU
	MIGDevices []ReportMIG `json:"mig_devices"`
}

// ReportMIG is one MIG instance of a ranked GPU.
type ReportMIG struct {
	Chosen bool `json:"chosen"`
	GPU
}

// WriteJSON writes the same content as Write as one indented JSON Report.
// Memory is in bytes; an unknown compute capability is 0.0, an unknown
// utilisation -1 and an unknown MIG mode "".
func WriteJSON(w io.Writer, inv Inventory, sel *Selection, policy Policy) error {
	policy = reportPolicy(policy)
	chosen := chosenSet(sel)
	rep := Report{Source: inv.Source, Note: inv.Note, Policy: policy, Devices: []ReportDevice{}}
	for r, g := range Rank(inv.GPUs, policy) {
		d := ReportDevice{Rank: r + 1, Chosen: chosen[strings.ToLower(g.UUID)], GPU: g, MIGDevices: []ReportMIG{}}
		for _, m := range g.MIGDevices {
			d.MIGDevices = append(d.MIGDevices, ReportMIG{Chosen: chosen[strings.ToLower(m.UUID)], GPU: m})
		}
		d.GPU.MIGDevices = nil
		rep.Devices = append(rep.Devices, d)
	}
	if sel != nil {
		s := *sel
		// Empty lists, not null, so that scripts can iterate without a check.
		if s.GPUs == nil {
			s.GPUs = []GPU{}
		}
		if s.Warnings == nil {
			s.Warnings = []string{}
		}
		if s.Env == nil {
			s.Env = []string{}
		}
		rep.Selection = &s
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("writing device report: %w", err)
	}
	return nil
}
