"""Where a completion ends: the rest of the file as every step asks about it (`rest_of_file`: the
cursor's context, the line ends of generated text, the echo rule, the whole-file check) and the
stop policy that decides after every token, with why a completion ended (`policy`)."""
