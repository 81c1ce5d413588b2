# Dies of SIGABRT in case 2 of 3, as a program does whose abort cmocka cannot catch (ASan's
# abort_on_error, a double free): the plan and case 1, then nothing.
echo '1..3'
echo 'ok 1 - test_one'
kill -ABRT $$
