"""The whole study as stages with files between them: its config (``config``), its plan of
stages with their fingerprints and the ledger (``plan``), the kinds of stage and the registry
of what runs each one (``stages``), and its timing table (``bench``)."""
