"""What-if studies: many settings at once, as tidy tables, plots and breakdowns.

A *sweep* runs the tool for every combination of the values given to the
sweepable flags (``-p 8,16,32 --bw 16,100``) on the local cores and gathers
one row per setting in a pandas DataFrame (``sweep``); ``plot`` draws a
metric against a swept axis (matplotlib); ``breakdown`` groups a result's
cost by operator kind and by layer group and compares it layer by layer with
a baseline.  pandas and matplotlib are imported by these modules only, so a
plain run of the tool never loads them.
"""
