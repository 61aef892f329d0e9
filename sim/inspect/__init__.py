"""Looking at runs: trace files, per-core summaries, trace tools, Gantt charts and layout maps and plots."""
