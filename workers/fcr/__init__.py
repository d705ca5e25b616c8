"""The ``fcr/1`` run-log format (docs/fcr.md): the one bounded line reader and the validator.

No Django import: used by the upload validator, the certificate engine, the fidelity audit and the importers.
"""
from workers.fcr.reader import (FcrLimitError, FcrParseError, LineReader, ReadLimits, iter_lines, iter_records,
                                open_binary)
from workers.fcr.validate import FcrIssue, validate_file, validate_record

__all__ = ["FcrIssue", "FcrLimitError", "FcrParseError", "LineReader", "ReadLimits", "iter_lines", "iter_records",
           "open_binary", "validate_file", "validate_record"]
