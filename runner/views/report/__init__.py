"""``diffprobe report``: a verified bundle shown to people, in the terminal and as one HTML file.

People read evidence, they do not parse it. Everything shown is derived from the bundle itself:
each differential is re-judged from the receipts it names (a differential only pairs base and head;
the receipts are what was observed), each incident step's evidence level follows from those
transitions, and side effects are counted from the receipts' recorded effects. Receipts may come
from untrusted forks, so every piece of their text is escaped, for rich markup and for HTML alike.

What the report derives from a bundle (the view model): ``verified`` (the bundle, loaded, verified
and re-judged), ``incident`` (the seven steps and their evidence levels), ``effects`` (side-effect
counts before and after), ``matrix`` (status by source), ``sources`` (what each source is). Derived
once, rendered twice: ``terminal`` and ``html``.
"""
