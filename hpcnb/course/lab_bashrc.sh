# The course Lab's terminals (`bash --rcfile` this `-i`: hpcnb/course/lab.py): your own ~/.bashrc,
# then the course's folders first on PATH (hpcnb, and the Slurm the notebooks use), whatever it set.
if [ -f ~/.bashrc ]; then . ~/.bashrc; fi
if [ -n "${HPCNB_LAB_PATH:-}" ]; then PATH="$HPCNB_LAB_PATH:$PATH"; export PATH; fi
