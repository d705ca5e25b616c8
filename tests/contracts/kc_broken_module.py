"""An uploaded kernel module that fails at import time."""

raise ImportError("this kernel needs a module that is not installed")
