# Hangs in case 1 of 2 until meson's timeout kills it: the plan, then nothing.
echo '1..2'
exec sleep 60
