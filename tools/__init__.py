"""Tools of the repository that the installed package does not carry: the fuzz campaigns, the C-runtime check and the documentation generators."""
