%% @doc Runs the `company' example of the Mnesia User's Guide (Mnesia's own `company.erl',
%% from Debian's erlang-examples, copied into `_build' by scripts/mnesia-examples) through
%% the Guide's steps on this node, and compares two runs: the program as shipped, on
%% `mnesia:transaction/1', and the copy whose call sites run `hypermnesia:async_ec/1' on EC
%% tables (`make mnesia-examples').
%%
%% The steps: create the tables (`init/0'), fill them (`fill_tables/0'), then every query and
%% update the Guide shows, QLC queries included: `females/0', `all_females/0',
%% `female_bosses/0', `get_emps/2', `get_emps2/2', `find_male_on_second_floor/0',
%% `raise_females/1', `raise/2', `insert_emp/3', `remove_proj/1', `sync/0', then every
%% table's final content. A transaction's `{atomic, Result}' and an `async_ec' activity's
%% `Result' count as the same answer; lists are compared as sets of answers (an EC table, like
%% a Mnesia `set', returns rows in hash order).
-module(hm_company_check).

-export([main/1]).

%% @doc `main(["run", OutFile])' runs the steps and writes the answers to `OutFile';
%% `main(["compare", Expected, Actual])' prints each step's answer from both runs and halts
%% with status 1 unless every one is the same.
-spec main([string()]) -> no_return().
main(["run", Out]) ->
    ok = hypermnesia:start(),
    Answers = steps(),
    ok = file:write_file(Out, io_lib:format("~p.~n", [Answers])),
    io:format("company: ~b steps run on ~s, answers in ~s~n",
              [length(Answers), context(), Out]),
    halt(0);
main(["compare", Expected, Actual]) ->
    {ok, [A]} = file:consult(Expected),
    {ok, [B]} = file:consult(Actual),
    Diffs = [Step || {{Step, X}, {Step, Y}} <- lists:zip(A, B), X =/= Y],
    [io:format("company: ~-26s ~s ~0p~n",
               [io_lib:format("~0p", [Step]), same(lists:member(Step, Diffs)), X])
     || {Step, X} <- B],
    case Diffs =:= [] andalso length(A) =:= length(B) of
        true ->
            io:format("company: async_ec gave the same answers as transaction in all ~b "
                      "steps~n", [length(A)]),
            halt(0);
        false ->
            io:format("company: FAILED, answers differ in ~p~n", [Diffs]),
            halt(1)
    end.

context() ->
    case hypermnesia:is_ec_table(employee) of
        true -> "EC tables under async_ec";
        false -> "Mnesia tables under transaction"
    end.

same(false) -> "same     ";
same(true) -> "DIFFERENT".

steps() ->
    _ = company:init(),
    ok = company:fill_tables(),
    NewEmp = {employee, 104999, "Lovelace Ada", 2, female, 99999, {222, 11}},
    Steps = [{females, fun() -> company:females() end},
             {all_females, fun() -> company:all_females() end},
             {female_bosses, fun() -> company:female_bosses() end},
             {get_emps, fun() -> company:get_emps(2, 'B/SFR') end},
             {get_emps2, fun() -> company:get_emps2(2, 'B/SFR') end},
             {find_male_on_second_floor, fun() -> company:find_male_on_second_floor() end},
             {raise_females, fun() -> company:raise_females(100) end},
             {raise, fun() -> company:raise(104465, 1000) end},
             {insert_emp, fun() -> company:insert_emp(NewEmp, 'B/SF', [erlang, mnesia]) end},
             {females_after_insert, fun() -> company:females() end},
             {female_bosses_after_insert, fun() -> company:female_bosses() end},
             {remove_proj, fun() -> company:remove_proj(otp) end},
             {sync, fun() -> company:sync() end}],
    Answers = [{Step, answer(F())} || {Step, F} <- Steps],
    %% then, and only then, every table's final content
    Answers ++ [{{table, T}, answer(mnesia:dirty_match_object(mnesia:table_info(T, wild_pattern)))}
                || T <- lists:sort(company:tabs())].

answer({atomic, R}) -> answer(R);
answer(L) when is_list(L) -> lists:sort(L);
answer(R) -> R.
