%% Unit tests of hm_mrdt_store's node-wide table of unpacked blocks.
-module(hm_mrdt_store_tests).
-include_lib("eunit/include/eunit.hrl").

-define(TAB, hm_mrdt_store_tests_repo).
-define(OTHER, hm_mrdt_store_tests_other).

%% Collection purges the unpacked blocks of the commits it deleted from the repository's
%% table, and only those. A collection follows every second under load, when the table holds
%% the blocks of thousands of commits: a purge costing a scan of the table per commit gone
%% kept a repository's server busy for more than 30 s in the sessions benchmark (its
%% sessions' publishes waited meanwhile). The budget is in reductions, not time: one scan
%% of the table and a delete per block stays far below it, a scan per commit far above.
purge_unpacked_test_() ->
    {setup,
     fun() ->
             Unpacked = hm_mrdt_store:new_unpacked(),
             Repo = ets:new(?TAB, [set, public, named_table, {keypos, 2}]),
             {Unpacked, Repo}
     end,
     fun({Unpacked, Repo}) -> ets:delete(Unpacked), ets:delete(Repo) end,
     fun(_) ->
             N = 3000,
             Commits = [<<I:32>> || I <- lists:seq(1, N)],
             Kept = [C || <<I:32>> = C <- Commits, I rem 2 =:= 0],
             Rec = fun(C) -> {commit, [], #{}, 1, #{<<C/binary, 1>> => leaf,
                                                     <<C/binary, 2>> => blob}} end,
             _ = [ets:insert(?TAB, {?TAB, {block, C}, stored}) || C <- Kept],
             ok = hm_mrdt_store:keep_unpacked(?TAB, [{C, Rec(C)} || C <- Commits]),
             ok = hm_mrdt_store:keep_unpacked(?OTHER, [{C, Rec(C)} || C <- Commits]),
             {reductions, R0} = process_info(self(), reductions),
             ok = hm_mrdt_store:purge_unpacked(?TAB),
             {reductions, R1} = process_info(self(), reductions),
             Left = fun(Tab) ->
                            lists:usort(ets:select(hm_mrdt_store:unpacked(),
                                                   [{{{Tab, '$1', '_'}, '_'}, [], ['$1']}]))
                    end,
             [?_assertEqual(Kept, Left(?TAB)),
              ?_assertEqual(Commits, Left(?OTHER)),
              ?_assertEqual(3 * length(Kept),
                            length(ets:select(hm_mrdt_store:unpacked(),
                                              [{{{?TAB, '_', '_'}, '_'}, [], [true]}]))),
              ?_assert(R1 - R0 < 50 * 6 * N)]
     end}.
