package ojas

// #include <ojas/ojas.h>
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Profile describes the machine as ojas sees it.
type Profile struct {
	CPUModel    string   // /proc/cpuinfo's model name ("unknown" when absent)
	ISA         []string // the ISA extensions ojas's CPU kernels use that the CPU has
	Cores       int      // CPUs usable by this process (affinity and cgroup quota)
	MemoryBytes int64    // host memory this process may use (cgroup limits respected)
	CUDADevices []string // CUDA devices that open ("cuda:0", ...)
	CUDAError   string   // why cuda:<len(CUDADevices)> did not open
	Ceiling     int64    // the process memory ceiling, 0 when none
}

// isaFlags are the /proc/cpuinfo flags ojas's kernels dispatch on.
var isaFlags = []string{"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"}

// SystemProfile reports the CPU model and ISA, the usable cores, the host
// memory and the CUDA devices this build can open (each tried by opening an
// engine on it, then closed).
func SystemProfile() Profile {
	p := Profile{CPUModel: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		gotModel, gotFlags := false, false
		for sc.Scan() && !(gotModel && gotFlags) {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k == "model name" && !gotModel {
				p.CPUModel, gotModel = v, true
			} else if k == "flags" && !gotFlags {
				have := map[string]bool{}
				for _, fl := range strings.Fields(v) {
					have[fl] = true
				}
				for _, fl := range isaFlags {
					if have[fl] {
						p.ISA = append(p.ISA, fl)
					}
				}
				gotFlags = true
			}
		}
		f.Close()
	}
	p.MemoryBytes = int64(C.oj_host_memory_bytes())
	p.Ceiling = int64(C.oj_memory_ceiling())
	cfg := C.oj_engine_config_default()
	cfg.budget_bytes = 1 << 20 // opened to be asked, not used
	var eng *C.oj_engine
	if C.oj_engine_create(&cfg, &eng, nil) == C.OJ_OK {
		p.Cores = int(C.oj_engine_threads(eng))
		C.oj_engine_free(eng)
	}
	for i := 0; i < 64; i++ {
		cfg.device = C.oj_device{_type: C.OJ_DEVICE_CUDA, index: C.int(i)}
		var e C.oj_error
		if st := C.oj_engine_create(&cfg, &eng, &e); st != C.OJ_OK {
			p.CUDAError = C.GoString(&e.message[0])
			break
		}
		C.oj_engine_free(eng)
		p.CUDADevices = append(p.CUDADevices, fmt.Sprintf("cuda:%d", i))
	}
	return p
}

// SetMemoryCeiling sets a process-wide memory ceiling of bytes over every
// CPU engine's budget (every model's and trainer's): together they cannot
// reserve more; a reservation beyond it is ErrCapacity naming the
// "process memory ceiling". 0 removes it. Refused with ErrState while any
// model, trainer or engine is open, and with ErrInvalid above the host
// memory this process may use (oj_set_memory_ceiling).
func SetMemoryCeiling(bytes int64) error {
	var e C.oj_error
	return fromC(C.oj_set_memory_ceiling(C.int64_t(bytes), &e), &e)
}

// MemoryCeiling returns the ceiling (0: none) and the bytes reserved on it.
func MemoryCeiling() (limit, used int64) {
	return int64(C.oj_memory_ceiling()), int64(C.oj_memory_ceiling_current())
}
