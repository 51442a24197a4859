#!/usr/bin/env python3
"""check_corpus.py — tests/lab03/ir_corpus.h must hold exact copies of the IR files it names.

The lab 03 hidden tests embed IR texts from tests/ir/bad and tests/ir/good (the grading
sandbox cannot read the tree). This check, run by `make test`, fails when an embedded text
or its expected message no longer matches the file on disk, naming the file, so the copy
cannot drift silently. Run from the repository root."""
import codecs
import os
import re
import sys

HDR = "tests/lab03/ir_corpus.h"


def c_string(lits):
    """Join the C string literals of one initializer and decode their escapes."""
    return codecs.decode("".join(lits), "unicode_escape")


def main():
    src = open(HDR).read()
    problems, n = [], 0
    for table, folder in (("l3_bad_ir", "tests/ir/bad"), ("l3_good_ir", "tests/ir/good")):
        body = re.search(r"%s\[\] = \{(.*?)\n\};" % table, src, re.S)
        if not body:
            problems.append(f"{HDR}: table {table} not found")
            continue
        for entry in re.finditer(r"\{((?:\s*\"(?:[^\"\\]|\\.)*\"\s*,?)+)\s*\}", body.group(1)):
            lits = re.findall(r"\"((?:[^\"\\]|\\.)*)\"\s*(,?)", entry.group(1))
            # fields are separated by commas: name, expect, then the text's literals
            fields, cur = [], []
            for text, comma in lits:
                cur.append(text)
                if comma:
                    fields.append(c_string(cur))
                    cur = []
            if cur:
                fields.append(c_string(cur))
            if len(fields) != 3:
                problems.append(f"{HDR}: an entry of {table} does not have 3 fields: {fields[:1]}")
                continue
            name, expect, text = fields
            path = os.path.join(folder, name)
            n += 1
            if not os.path.exists(path):
                problems.append(f"{HDR}: {name}: {path} no longer exists")
            elif open(path).read() != text:
                problems.append(f"{HDR}: {name}: the embedded text differs from {path}: copy it again")
            elif expect and f"# expect: {expect}" not in text:
                problems.append(f"{HDR}: {name}: expected message '{expect}' is not the file's '# expect:' line")
    for p in problems:
        print(p)
    if n == 0:
        print(f"{HDR}: no entries found")
        return 1
    print(f"{HDR}: {n} embedded IR texts match tests/ir" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
