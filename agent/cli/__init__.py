"""The commands: ``main`` is the ``phasewatch`` entry point and imports one
module per subcommand; ``phasewatchd`` and ``aot_build`` are entry points too.
Commands share only ``arguments``; nothing below imports this package."""
