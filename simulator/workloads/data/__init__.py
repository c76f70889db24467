"""Data files shipped with llmsim (see each module that reads them)."""
