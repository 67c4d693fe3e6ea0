"""This machine and its home folder: where the stack lives (settings), one writer per home (lock), the processes we start, memory peaks."""
