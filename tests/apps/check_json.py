#!/usr/bin/env python3
"""Checks kda-check's --json against its --csv of the same run: one JSON row per CSV row, the CSV
header's columns as keys, numbers as JSON numbers (full precision, agreeing with the CSV's
rounded text), null where the CSV shows "-" (or a value that is not finite), text as strings.

    check_json.py REPORT.json REPORT.csv"""
import csv
import decimal
import json
import sys

TEXT = {"shape", "gate", "path", "variant", "tensor", "repeat", "carry_weak", "verdict"}


def main(json_path, csv_path):
    doc = json.load(open(json_path, encoding="utf-8"))
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns, csv_rows = reader.fieldnames, list(reader)
    rows = doc["rows"]
    assert len(rows) == len(csv_rows) > 0, (len(rows), len(csv_rows))
    numbers = 0
    for i, (row, cells) in enumerate(zip(rows, csv_rows)):
        assert sorted(row) == sorted(columns), f"row {i}: keys {sorted(row)} != CSV {sorted(columns)}"
        for key in columns:
            value, cell = row[key], cells[key]
            if cell == "-" or cell in ("nan", "inf", "-inf"):
                assert value is None, f"row {i} {key}: {value!r} for CSV {cell!r}, expected null"
            elif key in TEXT:
                assert isinstance(value, str) and value == cell, f"row {i} {key}: {value!r} vs {cell!r}"
            else:
                assert isinstance(value, (int, float)) and not isinstance(value, bool), \
                    f"row {i} {key}: {value!r} is not a number"
                # The CSV rounds (to its last printed digit); the JSON must round to it.
                half_unit = decimal.Decimal(1).scaleb(decimal.Decimal(cell).as_tuple().exponent) / 2
                assert abs(decimal.Decimal(value) - decimal.Decimal(cell)) <= half_unit * \
                    decimal.Decimal("1.000001"), f"row {i} {key}: {value!r} vs CSV {cell!r}"
                numbers += 1
    assert isinstance(doc["seed"], int) and isinstance(doc["summary"]["rows"], int)
    print(f"check_json: {len(rows)} rows, {numbers} numbers, keys match the CSV header")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
