"""The `minigpt` command line: the Typer app (app), help and completion (help), what runs around
the process (process), `minigpt train`'s launch (launcher), the sample command's modes (sample)
and interactive loop (interactive), the inspect commands' files and terminal output (pages), and
`minigpt runs` (runs_table). Only this subpackage imports typer."""
