"""The ``fcr/1`` run-log format (spec/fidelity.md §4): streaming reader and validator.

No Django import: used by the upload validator, the certificate engine and the fidelity audit.
"""
from workers.fcr.reader import FcrParseError, iter_lines, iter_records, open_binary
from workers.fcr.validate import FcrIssue, validate_file, validate_record

__all__ = ["FcrIssue", "FcrParseError", "iter_lines", "iter_records", "open_binary", "validate_file", "validate_record"]
