#!/usr/bin/env python3
"""Reads ctest's JUnit file of the emulated build and prints how many CUDA
tests (a name with "Cuda") ran, passed, failed and skipped; exits 1 if any
CUDA test skipped (on the emulator every one must run) or none ran."""
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
cases = [c for c in root.iter("testcase") if "Cuda" in c.get("name", "")]
skipped = [c.get("name") for c in cases if c.find("skipped") is not None or c.get("status") == "notrun"]
failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
ran = len(cases) - len(skipped)
print(f"CUDA tests on the emulator: {ran} ran, {ran - len(failed)} passed, {len(failed)} failed, {len(skipped)} skipped")
for name in skipped:
    print(f"  skipped (a failure here): {name}")
if skipped or not cases:
    sys.exit(1)
