"""Reports: the self-contained HTML report of a run (jinja2 templates, matplotlib SVG figures)."""
