%% @doc Flow control between the copies of an EC table, as RabbitMQ's credit flow between
%% processes: a copy whose writers outrun a member holds back the answers to their `async'
%% writes (already applied and sent) while that member lags too far behind on its
%% operations, so that logs, metadata and queues stay bounded. Part of the per-table core
%% ({@link hm_ec_table}); pure.
%%
%% Invariants: only a member that is reachable, acknowledging and caught up is waited for
%% (a partition never stops writers); an answer is held back for ?FLOW_HOLD_TICKS ticks at
%% most; every answer held is given exactly once.
-module(hm_ec_table_flow).
-include("hm_ec_table.hrl").

-export([flow_check/3, flow_changed/1, flow_release/1, release_held/2, reply/3]).

%% an answer held back goes after this many ticks at most
-define(FLOW_HOLD_TICKS, 2).

%% Flow control between members (as RabbitMQ's credit flow between processes): a copy
%% whose writers outrun a member, which falls ever further behind on their operations
%% (bench/REPORT.md: its queue grew to tens of thousands of operations while the others ran
%% on), holds back the answer to its writers' `async' writes, already applied and sent,
%% while a member lags on its operations by more than `flow' (default ?FLOW_LIMIT) beyond
%% the least it lagged since it was last heard from anew. The log, the metadata of unstable
%% keys and the member's queue stay bounded, and so does the time to stability. Only a
%% member reachable, acknowledging (within ?FLOW_SILENT_TICKS ticks) and caught up is
%% waited for: one cut off, silent or not heard from since it came back is not, so writes
%% stay available in a partition. Nor is any member while one heard from anew is more than
%% `flow' behind (back from a partition, or restarted), until it is within `flow' once:
%% after a partition every copy applies the other side's backlog, and the operations made
%% meanwhile come after it; waiting for them stopped writers on both sides until every
%% copy had applied it (run quick-20261124-0605). An answer is held for ?FLOW_HOLD_TICKS
%% ticks at most. Returns the state with the members' baselines updated, and whether a
%% member holds writers back.
%%
%% Its inputs other than this copy's own writes (members' acknowledgements, ticks, the
%% members reachable, members coming and going) change far less often than a copy writes,
%% so flow/1 also says up to which of its own sequence numbers its answer `false' holds
%% (`flow_until'), and flow_check/3 asks it again only past that or once an input changed
%% (flow_changed/1).
flow(T = #t{flow = infinity}) -> {T#t{flow_until = infinity}, false};
flow(T = #t{flow = Limit, flow_base = Base0, up = Up, tcsb = B}) ->
    Self = ?NODE_OF(B),
    Own = own_seq(B),
    {Base, Blocked, CatchingUp, Until} =
        lists:foldl(fun(M, Acc) when M =:= Self -> Acc;
                       (M, {Bs, Bl, C, U}) ->
                            %% a member owed this copy's state (it lacks operations
                            %% that left the log unstable) catches up by state, not by
                            %% the operations writers make here
                            case lists:member(M, Up) andalso
                                hm_tcsb:acked_within(M, ?FLOW_SILENT_TICKS, B) andalso
                                not hm_tcsb:lacks_given_up(M, B) andalso
                                hm_tcsb:lag(M, B) of
                                Lag when is_integer(Lag) ->
                                    %% M holds writers back once this copy's own
                                    %% sequence number passes Own - Lag + Least + Limit
                                    case Bs of
                                        #{M := Least} when Least =< Lag ->
                                            {Bs, Bl orelse Lag > Least + Limit, C,
                                             min(U, Own - Lag + Least + Limit)};
                                        #{M := _} -> {Bs#{M := Lag}, Bl, C, min(U, Own + Limit)};
                                        _ when Lag =< Limit ->
                                            {Bs#{M => Lag}, Bl, C, min(U, Own + Limit)};
                                        _ -> {Bs, Bl, true, U}
                                    end;
                                _ -> {maps:remove(M, Bs), Bl, C, U}
                            end
                    end, {Base0, false, false, infinity}, hm_tcsb:members(B)),
    Holds = Blocked andalso not CatchingUp,
    {T#t{flow_base = Base, flow_until = if Holds -> 0; CatchingUp -> infinity; true -> Until end},
     Holds}.

%% flow/1 for a write, `Seq' its sequence number, `Up' the members reachable now: its last
%% answer while it holds.
-spec flow_check([node()], non_neg_integer(), #t{}) -> {#t{}, boolean()}.
flow_check(Up, Seq, T = #t{up = Up, flow_until = Until}) when Until =/= 0, Seq =< Until ->
    {T, false};
flow_check(Up, _Seq, T) -> flow(T#t{up = Up}).

%% Something flow/1 reads other than this copy's own writes changed.
-spec flow_changed(#t{}) -> #t{}.
flow_changed(T) -> T#t{flow_until = 0}.

own_seq(B) -> hm_vv:get(hm_tcsb:self(B), hm_tcsb:delivered(B)).

%% The answers held back that may go: `all', or those held ?FLOW_HOLD_TICKS ticks (`old').
-spec release_held(all | old, #t{}) -> {#t{}, effects()}.
release_held(_, T = #t{held = []}) -> {T, []};
release_held(all, T = #t{held = Held}) ->
    {T#t{held = []}, [reply(From, Dot, ok) || {From, Dot, _} <- lists:reverse(Held)]};
release_held(old, T = #t{held = Held, ticks = N}) ->
    {Go, Stay} = lists:partition(fun({_, _, At}) -> N - At >= ?FLOW_HOLD_TICKS end, Held),
    {T#t{held = Stay}, [reply(From, Dot, ok) || {From, Dot, _} <- lists:reverse(Go)]}.

%% After what may let a member catch up (its acknowledgement, a tick, a node down): the
%% answers held back go when no member holds writers back any more.
-spec flow_release(#t{}) -> {#t{}, effects()}.
flow_release(T = #t{held = []}) -> {T, []};
flow_release(T0) ->
    case flow(T0) of
        {T, false} -> release_held(all, T);
        {T, true} -> {T, []}
    end.

%% The answer to a caller: one of hm_ec_table:submit_after/6 learns the dot of its write.
-spec reply(term(), hm_vv:dot() | none, term()) -> hm_ec_table:effect().
reply({with_dot, From}, Dot, ok) -> {reply, From, {ok, Dot}};
reply({with_dot, From}, _Dot, R) -> {reply, From, R};
reply(From, _Dot, R) -> {reply, From, R}.
