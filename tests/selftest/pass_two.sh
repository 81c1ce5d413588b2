# Passes both of its cases, as cmocka with CMOCKA_MESSAGE_OUTPUT=TAP prints them.
echo '1..2'
echo 'ok 1 - test_one'
echo 'ok 2 - test_two'
echo '# ok - pass_two'
