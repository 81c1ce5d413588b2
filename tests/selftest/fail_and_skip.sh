# Fails case 2 and skips case 3 of 3; a skipped case counts as failed.
echo '1..3'
echo 'ok 1 - test_one'
echo 'not ok 2 - test_two'
echo 'ok 3 # SKIP test_three'
exit 1
