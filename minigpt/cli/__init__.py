"""The `minigpt` command line: the Typer app and its short commands (app), `minigpt train` (train),
`minigpt sample` (sample) and its interactive loop (interactive), `minigpt heads` and `lens`,
help and completion (help), what runs around the process (process), the inspect commands' files
and terminal output (pages), and `minigpt runs` (runs_table). Only this subpackage imports typer."""
