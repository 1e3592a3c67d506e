#pragma once
// What the CPU running this process can execute, read once from CPUID and the
// OS's saved-state mask (XCR0): an instruction set counts only where the OS
// also saves its registers. The kernels that need more than the build's
// baseline are chosen from these at run time (ops/matmul).

namespace nanoserve {

struct CpuFeatures {
  bool avx2 = false;      // with FMA and F16C
  bool avx_vnni = false;  // VEX vpdpbusd on 256-bit vectors
  bool avx512 = false;    // F, BW, VL (opmask and ZMM state saved by the OS)
  bool avx512_vnni = false;
  bool amx_int8 = false;  // AMX-TILE and AMX-INT8 in CPUID, tile state in XCR0
};

// Read on first call, then cached. All false off x86-64.
const CpuFeatures& cpu_features();

// AMX tiles need the kernel's permission per process (Linux arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA). Asked once, on the first call; false
// when the CPU lacks AMX-INT8 or the kernel refuses.
bool amx_tiles_permitted();

}  // namespace nanoserve
