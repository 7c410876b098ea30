"""An example job type shipped as a package: word statistics of text files, accents folded."""
