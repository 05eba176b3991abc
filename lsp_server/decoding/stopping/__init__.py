"""Where a completion ends: the cursor's context (`context`), the line ends of generated text
(`line_scanner`), compatibility with the rest of the file (`compatibility`) and the stop
policy that decides after every token (`policy`)."""
