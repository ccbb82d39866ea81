"""Foundations every stage uses: shipped resources, host lists, versions, YAML with line
numbers, file locks. Nothing here imports another stetho stage."""
