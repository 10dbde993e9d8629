"""Ray job entrypoints and benchmark commands of tfgm-dist."""
