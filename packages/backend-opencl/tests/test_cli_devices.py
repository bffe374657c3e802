"""`uopgrad devices` on a machine with this package installed lists CL as available."""
import json
import subprocess
import sys


def test_devices_lists_cl_with_its_package_and_dtypes():
    out = subprocess.run([sys.executable, "-m", "uopgrad", "devices", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["backend"]: r for r in json.loads(out.stdout)}
    cpu = rows["CL"]
    assert cpu["package"] == "uopgrad-opencl" and cpu["available"], cpu
    assert "float32" in cpu["dtypes"] and "REFERENCE" in rows
