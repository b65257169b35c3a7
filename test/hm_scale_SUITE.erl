%% @doc An EC table at scale through a long partition, scaled down to run in `make test'
%% (`make bench-scale' runs the full one): three `ram_copies' of a table of 100,000 rows, a
%% writer that never stops on node 1, node 3 cut off for 15 s.
%%
%% What it shows: past the bound on the log (`log_limit', 20,000 operations here), the
%% copies keep only what the members they reach lack, not every operation made for the one
%% cut off; after the heal the copy cut off catches up by state, the writer is not held back
%% by it, and every copy ends equal, with no operation or timestamp left unstable. And a
%% copy added to such a table while the writer runs receives it in parts, through a cut in
%% the middle of the transfer, and ends equal to the others.
-module(hm_scale_SUITE).
-include_lib("common_test/include/ct.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([log_bounded_through_a_long_cut/1, a_copy_added_under_writes_comes_in_parts/1]).
%% run on the nodes
-export([fill/2, writer_start/2, writer_count/0, writer_stop/0, digest/1]).

-define(ROWS, 100000).
-define(LOG_LIMIT, 20000).
-define(CUT_MS, 15000).
%% what a copy may keep beyond the bound: the writes of this many recent ms (a member counts
%% as gone after a few seconds of silence)
-define(RECENT_MS, 6000).

suite() -> [{timetrap, {minutes, 5}}].

all() -> [log_bounded_through_a_long_cut, a_copy_added_under_writes_comes_in_parts].

init_per_suite(Config) ->
    C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config), prefix => "hmscale",
                           modules => [?MODULE]}),
    [{cluster, C} | Config].

end_per_suite(Config) ->
    hm_cluster:stop(?config(cluster, Config)).

call(C, I, M, F, A) -> hm_cluster:call(C, I, M, F, A, infinity).

info(C, I, Tab) -> call(C, I, hypermnesia, info, [Tab]).

log_bounded_through_a_long_cut(Config) ->
    C = ?config(cluster, Config),
    Tab = scale_ec,
    [ok = call(C, I, application, set_env, [hypermnesia, log_limit, ?LOG_LIMIT])
     || I <- [1, 2, 3]],
    Nodes = [hm_cluster:node(C, I) || I <- [1, 2, 3]],
    {atomic, ok} = call(C, 1, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [k, v]}, {ram_copies, Nodes}]]),
    ok = call(C, 1, ?MODULE, fill, [Tab, ?ROWS]),
    ok = call(C, 1, ?MODULE, writer_start, [Tab, ?ROWS]),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    T0 = erlang:monotonic_time(millisecond),
    %% every second of the cut once the member cut off counts as gone: node 1's log against
    %% the bound, with the writes of the last ?RECENT_MS
    Samples = sample(C, Tab, T0, [{now(T0), call(C, 1, ?MODULE, writer_count, [])}], []),
    ct:log("node 1 during the cut (ms, log, bound): ~p", [Samples]),
    [] = [S || S = {_, Log, Bound} <- Samples, Log > Bound],
    #{given_up_keys := GivenUp} = info(C, 1, Tab),
    true = GivenUp =:= all orelse GivenUp > 0,
    ok = hm_cluster:heal(C),
    %% the writer goes on after the heal: the copy catching up by state does not hold it
    W0 = call(C, 1, ?MODULE, writer_count, []),
    timer:sleep(3000),
    W1 = call(C, 1, ?MODULE, writer_count, []),
    ct:log("writes in the 3 s after the heal: ~p", [W1 - W0]),
    true = W1 - W0 > 1000,
    ok = call(C, 1, ?MODULE, writer_stop, []),
    ok = hm_cluster:wait_until(
           fun() -> length(lists:usort([call(C, I, ?MODULE, digest, [Tab])
                                        || I <- [1, 2, 3]])) =:= 1
           end, 120000),
    Infos = [info(C, I, Tab) || I <- [1, 2, 3]],
    ct:log("after the heal: ~p", [[maps:with([state_catch_ups, partial_states, size], X)
                                   || X <- Infos]]),
    true = maps:get(state_catch_ups, lists:nth(3, Infos)) > 0,
    ok = hm_cluster:wait_until(
           fun() -> lists:all(fun(I) ->
                                      #{unstable_keys := K, unstable_ops := O,
                                        given_up_keys := G} = info(C, I, Tab),
                                      {K, O, G} =:= {0, 0, 0}
                              end, [1, 2, 3])
           end, 60000),
    {atomic, ok} = call(C, 1, hypermnesia, delete_table, [Tab]),
    ok.

%% A table of ?ROWS rows on nodes 1 and 2, the writer on node 1; a copy added on node 3. Once
%% its first parts are written there, node 3 is cut off for 5 s: the transfer stalls, and
%% after the heal node 3 asks again and gets every part. It writes the table a part at a
%% time (its table process handled part messages), and once the writer stops every copy
%% holds the same rows.
a_copy_added_under_writes_comes_in_parts(Config) ->
    C = ?config(cluster, Config),
    Tab = scale_add,
    [N1, N2, N3] = [hm_cluster:node(C, I) || I <- [1, 2, 3]],
    ok = call(C, 3, application, set_env, [hypermnesia, slow_step_ms, 1000]),
    {atomic, ok} = call(C, 1, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [k, v]}, {ram_copies, [N1, N2]}]]),
    ok = call(C, 1, ?MODULE, fill, [Tab, ?ROWS]),
    ok = call(C, 1, ?MODULE, writer_start, [Tab, ?ROWS]),
    {atomic, ok} = call(C, 1, hypermnesia, add_table_copy, [Tab, N3, ram_copies]),
    ok = hm_cluster:wait_until(fun() -> call(C, 3, mnesia, table_info, [Tab, size]) > 0 end,
                               60000),
    Midway = info(C, 3, Tab),
    ct:log("node 3 when cut off: ~p", [maps:with([status, size], Midway)]),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    timer:sleep(5000),
    ok = hm_cluster:heal(C),
    ok = hm_cluster:wait_until(fun() -> maps:get(status, info(C, 3, Tab)) =:= ready end,
                               120000),
    ok = call(C, 1, ?MODULE, writer_stop, []),
    ok = hm_cluster:wait_until(
           fun() -> length(lists:usort([call(C, I, ?MODULE, digest, [Tab])
                                        || I <- [1, 2, 3]])) =:= 1
           end, 120000),
    #{step_totals := Steps, size := Size} = info(C, 3, Tab),
    ct:log("node 3's steps: ~p", [Steps]),
    true = Size >= ?ROWS,
    {Parts, _, _} = maps:get(merge_part, Steps, {0, 0, 0}),
    true = Parts >= ?ROWS div 5000 - 1,
    {atomic, ok} = call(C, 1, hypermnesia, delete_table, [Tab]),
    ok.

now(T0) -> erlang:monotonic_time(millisecond) - T0.

%% Node 1's log size and its bound, every second from ?RECENT_MS into the cut to its end.
sample(C, Tab, T0, Counts, Acc) ->
    timer:sleep(1000),
    Now = now(T0),
    Counts1 = [{Now, call(C, 1, ?MODULE, writer_count, [])} | Counts],
    #{unstable_ops := Log} = info(C, 1, Tab),
    Acc1 = case Now >= ?RECENT_MS of
               true ->
                   {_, Then} = hd([X || X = {T, _} <- Counts1, T =< Now - ?RECENT_MS]
                                  ++ [lists:last(Counts1)]),
                   {_, Latest} = hd(Counts1),
                   [{Now, Log, ?LOG_LIMIT + (Latest - Then)} | Acc];
               false -> Acc
           end,
    case Now >= ?CUT_MS of
        true -> lists:reverse(Acc1);
        false -> sample(C, Tab, T0, Counts1, Acc1)
    end.

%%% ---------------------------------------------------------------- on the nodes

%% @doc Write `Rows' rows, 1,000 per activity.
-spec fill(atom(), pos_integer()) -> ok.
fill(Tab, Rows) ->
    lists:foreach(fun(From) ->
                          ok = hypermnesia:async_ec(
                                 fun() ->
                                         lists:foreach(fun(K) -> mnesia:write({Tab, K, 0}) end,
                                                       lists:seq(From, min(Rows, From + 999)))
                                 end)
                  end, lists:seq(1, Rows, 1000)).

%% @doc Start a writer of random keys among `Keys', counting its writes.
-spec writer_start(atom(), pos_integer()) -> ok.
writer_start(Tab, Keys) ->
    Counter = counters:new(1, []),
    persistent_term:put({?MODULE, counter}, Counter),
    Pid = spawn(fun() -> write_loop(Tab, Keys, Counter) end),
    persistent_term:put({?MODULE, writer}, Pid),
    ok.

write_loop(Tab, Keys, Counter) ->
    receive stop -> ok
    after 0 ->
            K = rand:uniform(Keys),
            ok = hypermnesia:async_ec(fun() -> mnesia:write({Tab, K, erlang:unique_integer()})
                                      end),
            counters:add(Counter, 1, 1),
            write_loop(Tab, Keys, Counter)
    end.

-spec writer_count() -> non_neg_integer().
writer_count() -> counters:get(persistent_term:get({?MODULE, counter}), 1).

-spec writer_stop() -> ok.
writer_stop() ->
    P = persistent_term:get({?MODULE, writer}),
    Ref = monitor(process, P),
    P ! stop,
    receive {'DOWN', Ref, process, P, _} -> ok end.

%% @doc This copy's rows, summed up: how many and a hash of them.
-spec digest(atom()) -> {non_neg_integer(), integer()}.
digest(Tab) ->
    ets:foldl(fun(R, {N, H}) -> {N + 1, (H + erlang:phash2(R)) band 16#FFFFFFFFFFFF} end,
              {0, 0}, Tab).
