"""``clusterclip`` command line: one thin sub-command per module (parser and handler); the logic lives in
the stages. :mod:`.main` builds the parser and is the entry point, :mod:`.options` holds the options
several commands share."""
