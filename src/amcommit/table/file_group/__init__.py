"""File groups and file slices: a file group (partition, file id) is a sequence of file slices,
each a base file and the log files written against it (:mod:`.model`); the footer index lookup
(:mod:`.index`); the merge of records into a file group's next version (:mod:`.merge`)."""
