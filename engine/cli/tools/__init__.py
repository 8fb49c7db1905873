"""Operator tools behind `kraftlog log|image|storage|gen`, shaped like Kafka's command-line tools.

    common.py     parser helpers (one-line usage errors), output rules, log-directory lookup
    progress.py   rich progress bars on stderr (off with --quiet or when stderr is not a terminal)
    segments.py   read-only view of a log directory: CRC scan, offset continuity, index checks
    dump.py       `log dump`: kafka-dump-log --cluster-metadata-decoder lines (or JSON lines)
    repair.py     `log repair --truncate-at-first-corruption`, with a backup of what it cuts
    log_cmd.py    the `log` group (dump, verify, repair)
    imageload.py  an image from a log directory or a .checkpoint file, read-only, with progress
    imagetree.py  the image as a tree of nodes (kafka-metadata-shell's /image layout)
    shell.py      the command loop of `image shell` (ls, cd, cat, tree, find, pwd, help, exit)
    image_cmd.py  the `image` group (show, shell)
    metaprops.py  meta.properties in Kafka's format; Kafka's uuid strings
    storage_cmd.py the `storage` group (random-uuid, format, info)
    gen_cmd.py    `gen`: the reference workload written as a real log directory

Every module here is imported only when its command runs (cli.py imports the *_cmd modules to
build the parser; they keep their heavy imports inside their run functions).
"""
