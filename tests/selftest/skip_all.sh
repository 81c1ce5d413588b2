# Skips everything, as a test whose server is missing might: meson's SKIP, a failure here.
echo '1..0 # SKIP no server'
