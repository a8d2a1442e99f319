# Sourced by OnDemand's job script after script.sh has started, before connection.yml is written
# (its "Connect" button appears then): wait until JupyterLab answers on its port.
echo "Waiting for JupyterLab to open port ${port}..."
if wait_until_port_used "${host}:${port}" 120; then
  echo "Discovered JupyterLab listening on port ${port}!"
else
  echo "Timed out waiting for JupyterLab to open port ${port}!"
  clean_up 1
fi
