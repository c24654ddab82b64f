"""What a person reads of a run: the phase table, the phase figure, the HTML
page and the PNG.  Imports ``live`` (symbols), ``formats`` and ``core``."""
