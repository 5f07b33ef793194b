#!/usr/bin/env python3
"""Compares two runs of llama.cpp's server tests (scripts/llama-server-tests/run): per test file,
how many tests passed on llama-server, on wick, and on both, as a markdown table.

    summarize.py LLAMA_SERVER_JUNIT WICK_JUNIT [--passing-list OUT] [--gaps]

--passing-list OUT writes the node ids that passed on llama-server (the list the integration test
runs against wick); --gaps prints those that passed on llama-server and not on wick."""
import argparse
import collections
import xml.etree.ElementTree as ET


def outcomes(path):
    """{node id: "passed" | "failed" | "skipped"} from a pytest junit file."""
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        node = module.replace(".", "/") + ".py::" + case.get("name", "")
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            result[node] = "failed"
        elif "skipped" in kinds:
            result[node] = "skipped"
        else:
            result[node] = "passed"
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("llama_server")
    parser.add_argument("wick")
    parser.add_argument("--passing-list")
    parser.add_argument("--gaps", action="store_true")
    args = parser.parse_args()
    ls, wk = outcomes(args.llama_server), outcomes(args.wick)
    rows = collections.defaultdict(lambda: [0, 0, 0, 0])
    for node in sorted(set(ls) | set(wk)):
        row = rows[node.split("::")[0]]
        row[0] += 1
        row[1] += ls.get(node) == "passed"
        row[2] += wk.get(node) == "passed"
        row[3] += ls.get(node) == "passed" and wk.get(node) == "passed"
    print("| file | tests | passed on llama-server | passed on wick | both |")
    print("|---|---:|---:|---:|---:|")
    total = [0, 0, 0, 0]
    for name, row in sorted(rows.items()):
        print(f"| {name.removeprefix('unit/')} | " + " | ".join(map(str, row)) + " |")
        total = [a + b for a, b in zip(total, row)]
    print("| **all** | " + " | ".join(f"**{n}**" for n in total) + " |")
    if args.passing_list:
        with open(args.passing_list, "w") as out:
            for node in sorted(n for n, o in ls.items() if o == "passed"):
                out.write(node + "\n")
    if args.gaps:
        print()
        for node in sorted(n for n, o in ls.items() if o == "passed" and wk.get(n) != "passed"):
            print(node)


if __name__ == "__main__":
    main()
