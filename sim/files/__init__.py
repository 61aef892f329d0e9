"""Reading and writing files safely: the one strict YAML reader, regular files only, atomic writes."""
