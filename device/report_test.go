package device

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

var update = flag.Bool("update", false, "rewrite the golden report files in testdata")

func TestWrite(t *testing.T) {
	titan := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	mig := inventoryFromNVML(t, "mig_a100.nvml.json")
	none := discover(t.Context(), noNVML, missingSMI)
	tests := []struct {
		golden string
		inv    Inventory
		req    *Request
		policy Policy
	}{
		{"report_titan_bf16_fallback.txt", titan, &Request{Precision: amp.BF16, PrecisionFallback: true}, ""},
		{"report_titan_cuda0.txt", titan, &Request{Device: MustSpec("cuda:0"), Precision: amp.FP16, AllowCPUFallback: true}, PolicyTotal},
		{"report_eight_free.txt", inventoryFromSMI(t, "eight_gpu.smi.csv"), &Request{Policy: PolicyFree, MinFreeMemory: 24000 * mib}, PolicyFree},
		{"report_mig.txt", mig, &Request{Device: MustSpec("MIG-4f8a"), AllowCPUFallback: true}, PolicyFree},
		{"report_old_driver.txt", inventoryFromSMI(t, "old_driver.smi.csv"), nil, ""},
		{"report_none.txt", none, &Request{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			var sel *Selection
			if tt.req != nil {
				s, err := Select(tt.inv, *tt.req)
				if err != nil {
					t.Fatal(err)
				}
				sel = &s
			}
			var b bytes.Buffer
			if err := Write(&b, tt.inv, sel, tt.policy); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.Bytes())
		})
	}
}

func TestWriteJSON(t *testing.T) {
	titan := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	sel, err := Select(titan, Request{Precision: amp.BF16, PrecisionFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, titan, &sel, ""); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_titan.json", b.Bytes())

	// Scripts read it back into the same shape.
	var rep Report
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Policy != PolicyTotal || len(rep.Devices) != 2 || !rep.Devices[0].Chosen || rep.Devices[0].UUID != uuidTitan ||
		rep.Devices[1].Chosen || rep.Selection == nil || !reflect.DeepEqual(rep.Selection.Env, sel.Env) {
		t.Errorf("read back %+v", rep)
	}

	// Without a selection and without GPUs, lists are empty, not null.
	b.Reset()
	if err := WriteJSON(&b, discover(t.Context(), noNVML, missingSMI), nil, PolicyFree); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_none.json", b.Bytes())
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run %s -update to accept):\n--- got\n%s--- want\n%s", name, t.Name(), got, want)
	}
}
