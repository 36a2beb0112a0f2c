"""Services behind the CLI and both GUIs: each stage of the study runs from a typed request,
reports progress through a callback, can be cancelled from another thread, and returns a
typed result. Nothing here prints or parses arguments."""
