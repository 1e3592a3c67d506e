"""scripts/ncu_stalls.py over a source page laid out as Nsight Compute writes it."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu_stalls.py")

# The report's own layout: the kernel's name, then the header (a subset of
# its 67 columns, in its order), then one row an instruction.
PAGE = '''"Kernel Name","void k<Source>(int)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_barrier","stall_long_sb","stall_short_sb","stall_barrier (Not Issued)","stall_long_sb (Not Issued)"
"0x10","@P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]","100","90","4,000","0","90","10","0","80"
"0x20","BAR.SYNC.DEFER_BLOCKING 0x0","300","300","1,000","300","0","0","300","0"
"0x30","HMMA.16816.F32 R4, R8, R12, R4","50","10","2,000","0","0","50","0","0"
"0x40","@!P1 LDGSTS.E.BYPASS.128 [R5], desc[UR4][R6.64]","50","40","3,000","0","50","0","0","40"
'''


def run(tmp_path, *args):
    path = tmp_path / "page.csv"
    path.write_text(PAGE)
    r = subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_totals_opcodes_and_reasons(tmp_path):
    out = run(tmp_path)
    assert out[0].startswith("stall samples: 500 over 4 instructions")
    # Shares of the 500 samples by mnemonic, predicates dropped: LDGSTS 150, BAR 300, HMMA 50.
    assert out[1] == "by opcode: BAR 60.0%, LDGSTS 30.0%, HMMA 10.0%"
    assert out[2] == "warp instructions executed: 10000; by opcode: LDGSTS 70.0%, HMMA 20.0%, BAR 10.0%"
    # The "(Not Issued)" columns are subsets of their reasons: not counted again.
    assert out[3] == "by reason: stall_barrier 60.0%, stall_long_sb 28.0%, stall_short_sb 12.0%"


def test_top_instructions_in_address_order(tmp_path):
    out = run(tmp_path, "--top", "2")
    rows = out[4:]
    assert len(rows) == 2
    assert rows[0].split()[:2] == ["0x10", "20.0%"]
    assert "[long_sb 18.0%, short_sb 2.0%]" in rows[0]
    assert rows[1].split()[:2] == ["0x20", "60.0%"]
