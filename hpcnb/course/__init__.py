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
