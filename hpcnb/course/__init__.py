"""The course as an instructor runs it: exercises from solutions, autograding in a sandbox, and
the course's Jupyter kernel.

* :mod:`hpcnb.course.grading` — ``hpcnb grading generate|check|release|collect|autograde|return``:
  nbgrader-style exercise notebooks made from ``solutions/``, the students' kit, graded submissions
  (the command line; the work in :mod:`~hpcnb.course.exercises`, :mod:`~hpcnb.course.release`,
  :mod:`~hpcnb.course.autograde`, through :mod:`~hpcnb.course.nbgrader_io`);
* :mod:`hpcnb.course.handout` — ``collect`` and ``return``: exercise notebooks out of, and feedback
  into, each portal user's home;
* :mod:`hpcnb.course.sandbox` — where student code runs while it is graded (bubblewrap: no network,
  no solutions, limits, a private local Slurm);
* :mod:`hpcnb.course.submissions`, :mod:`hpcnb.course.tamper`, :mod:`hpcnb.course.cgroup` — submissions
  read only as plain files, tampering with the tests detected, each sandbox's memory bounded;
* :mod:`hpcnb.course.kernel` — ``hpcnb kernel install``: the "hpcnb" Jupyter kernel, whose jobs
  find this environment's Slurm commands.
"""
import sys

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed (jupyter-events asks for
# jsonschema's "format-nongpl" extra), which builds 39 Earley parsers at import: 0.8 s of CPU in each
# process that reads a notebook, for an "iri" format check that no notebook schema uses. Grading
# starts such a process for every notebook: without the module, jsonschema leaves that check out.
sys.modules.setdefault("rfc3987_syntax", None)
