%% @doc Cluster-wide status: asks every member of the Mnesia cluster for its view and the
%% state of its EC table copies, and says whether every copy has converged (strong eventual
%% consistency, as in *Hypermnesia: Eventual Consistency in Mnesia*: copies that delivered
%% the same operations hold the same rows; behaviour under partitions, §4.10–4.12).
%%
%% {@link cluster_info/2} calls every member at once ({@link node_report/1} there) and
%% waits at most a timeout: a member that does not answer in time, that cannot be reached,
%% or where Hypermnesia does not run is reported as such, never waited for. The rest is
%% pure: {@link summarize/2} compares the answers.
%%
%% A table has converged when every copy holder answered, no copy is syncing or holds
%% operations it cannot deliver yet, every copy delivered the same operations (equal
%% delivered vectors) and every copy holds the same rows (equal digests, see
%% {@link hm_ec_watch:digest/1}). The cluster has converged when every member answered and
%% every table has. A copy's `lag' is how many operations it has not delivered of those some
%% copy that answered has delivered; its `stability_lag' how many it delivered are not
%% stable yet.
%%
%% A partitioned table is asked about as a whole: every fragment is a table of the answer,
%% with `fragment_of' naming the table it is part of, and the table has converged when all
%% its fragments have.
%%
%% Invariants: {@link summarize/2} is a function of the answers only; `converged' is never
%% true while a member did not answer; a copy with the greatest delivered vector has lag 0.
-module(hm_status).

-export([cluster_info/0, cluster_info/1, cluster_info/2, wait_converged/1, wait_converged/2,
         node_report/1, summarize/2]).
-export_type([info/0, options/0]).

-type info() :: #{converged := boolean(), nodes := #{node() => map()},
                  tables := #{atom() => map()}}.
-type options() :: #{timeout => pos_integer()}.
%% `timeout': how long to wait for the members' answers, in ms (default 5000).

-define(TIMEOUT_MS, 5000).
-define(POLL_MS, 200).

%%% ---------------------------------------------------------------- API

%% @doc Every EC table, asked of every member; see {@link cluster_info/2}.
-spec cluster_info() -> info() | {error, term()}.
cluster_info() -> cluster_info(all, #{}).

%% @doc One EC table (`all': every one); see {@link cluster_info/2}.
-spec cluster_info(atom()) -> info() | {error, term()}.
cluster_info(Tab) -> cluster_info(Tab, #{}).

%% @doc Ask every member of Mnesia's schema (`db_nodes') for its view and its copies of
%% `Tab' (`all': of every EC table), wait at most `timeout' ms, and compare. Errors:
%% `{error, {node_not_running, node()}}' when Hypermnesia does not run here,
%% `{error, {not_ec_table, Tab}}' when no member answered with a copy of `Tab' and this node
%% does not know it as an EC table, `{error, {bad_option, O}}'.
-spec cluster_info(atom(), options()) -> info() | {error, term()}.
cluster_info(Tab, Opts) when is_atom(Tab), is_map(Opts) ->
    case check_options(Opts) of
        ok ->
            case whereis(hm_ec_server) of
                undefined -> {error, {node_not_running, node()}};
                _ -> ask(Tab, maps:get(timeout, Opts, ?TIMEOUT_MS))
            end;
        Error -> Error
    end;
cluster_info(Tab, Opts) when is_atom(Tab) -> {error, {bad_option, Opts}};
cluster_info(Tab, _) -> {error, {bad_table, Tab}}.

check_options(Opts) ->
    case maps:to_list(maps:without([timeout], Opts)) of
        [O | _] -> {error, {bad_option, O}};
        [] ->
            case maps:get(timeout, Opts, ?TIMEOUT_MS) of
                T when is_integer(T), T > 0 -> ok;
                T -> {error, {bad_option, {timeout, T}}}
            end
    end.

ask(Tab, Timeout) ->
    Members = lists:usort([node() | db_nodes()]),
    %% the members' own calls end before ours gives up on them
    Inner = max(1, Timeout - min(500, Timeout div 4)),
    Answers = erpc:multicall(Members, ?MODULE, node_report, [#{table => Tab, timeout => Inner}],
                             Timeout),
    Info = label_fragments(summarize(names(Tab), lists:zip(Members, [answer(A) || A <- Answers]))),
    case {Tab, Info} of
        {all, _} -> Info;
        {_, #{tables := #{Tab := _}}} -> Info;
        _ ->
            case hm_ec_registry:is_ec_table(Tab) of
                true -> Info;
                false -> {error, {not_ec_table, Tab}}
            end
    end.

%% The tables asked about: a partitioned table's are all its fragments.
names(all) -> all;
names(Tab) -> hm_ec_frag:fragments(Tab).

%% Each fragment of a partitioned table says which table it is part of (`fragment_of').
label_fragments(Info = #{tables := Ts}) ->
    Info#{tables := maps:map(fun(T, V) ->
                                     case hm_ec_frag_info:fragment_of(T) of
                                         {ok, Base} -> V#{fragment_of => Base};
                                         none -> V
                                     end
                             end, Ts)}.

answer({ok, R = #{}}) -> {ok, R};
answer({error, {erpc, timeout}}) -> {error, timeout};
answer({error, {erpc, noconnection}}) -> {error, unreachable};
answer({error, {erpc, _}}) -> {error, unreachable};
answer({error, {exception, undef, _}}) -> {error, not_running};
answer({ok, {error, {node_not_running, _}}}) -> {error, not_running};
answer({Class, Reason}) -> {error, {Class, Reason}}.

%% @doc Wait until {@link cluster_info/0} says converged, for at most `TimeoutMs' ms.
%% `{error, {timeout, Info}}' with the last answer when it did not.
-spec wait_converged(non_neg_integer()) -> ok | {error, term()}.
wait_converged(TimeoutMs) -> wait_converged(all, TimeoutMs).

%% @doc {@link wait_converged/1} for one table (`all': every one).
-spec wait_converged(atom(), non_neg_integer()) -> ok | {error, term()}.
wait_converged(Tab, TimeoutMs) when is_integer(TimeoutMs), TimeoutMs >= 0 ->
    wait_converged(Tab, erlang:monotonic_time(millisecond) + TimeoutMs, TimeoutMs);
wait_converged(_, TimeoutMs) -> {error, {bad_timeout, TimeoutMs}}.

wait_converged(Tab, Deadline, TimeoutMs) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    case cluster_info(Tab, #{timeout => max(1, min(?TIMEOUT_MS, Left))}) of
        #{converged := true} -> ok;
        {error, _} = E -> E;
        Info when Left =< 0 -> {error, {timeout, Info}};
        _ ->
            timer:sleep(min(?POLL_MS, max(0, Left))),
            wait_converged(Tab, Deadline, TimeoutMs)
    end.

%%% ---------------------------------------------------------------- on each member

%% @doc This node's answer to {@link cluster_info/2}: its membership view and, for each
%% EC table copy here (or only `table'), the copy's status ({@link hm_ec_table_server:status/2}).
%% A copy whose process does not answer within `timeout' ms is reported `{error, timeout}'.
-spec node_report(#{table := atom(), timeout := pos_integer()}) -> map() | {error, term()}.
node_report(#{table := Tab, timeout := Timeout}) ->
    case whereis(hm_ec_server) of
        undefined -> {error, {node_not_running, node()}};
        _ ->
            Names = names(Tab),
            Tabs = [T || T <- local_ec_tables(), Names =:= all orelse lists:member(T, Names)],
            %% every table at once, each bounded
            Self = self(),
            Asked = [{T, spawn_monitor(fun() -> Self ! {self(), table_status(T, Timeout)} end)}
                     || T <- Tabs],
            Copies = maps:from_list([{T, collect(P, Timeout)} || {T, P} <- Asked]),
            #{membership => membership_status(),
              mnesia => mnesia:system_info(is_running),
              copies => Copies}
    end.

table_status(Tab, Timeout) ->
    try hm_ec_table_server:status(hm_ec_table_server:name(Tab), Timeout)
    catch exit:{timeout, _} -> {error, timeout};
          exit:_ -> {error, not_running}
    end.

collect({Pid, Ref}, Timeout) ->
    receive
        {Pid, R} -> erlang:demonitor(Ref, [flush]), R;
        {'DOWN', Ref, process, Pid, _} -> {error, not_running}
    after Timeout + 100 ->
            exit(Pid, kill),
            erlang:demonitor(Ref, [flush]),
            {error, timeout}
    end.

local_ec_tables() ->
    [T || T <- hm_membership:mnesia_list(local_tables), hm_ec_registry:is_ec_table(T)].

db_nodes() -> hm_membership:mnesia_list(db_nodes).

%% The membership process's report, or what it raised (not running, or too slow).
membership_status() ->
    try hm_membership:status()
    catch C:R -> {error, {C, R}}
    end.

%%% ---------------------------------------------------------------- comparing (pure)

%% @doc Compare the members' answers (`[{Node, {ok, Report} | {error, Why}}]', one per
%% member) for `Tab' (a table, a list of tables, or `all': every table some member
%% reported).
-spec summarize(atom() | [atom()], [{node(), {ok, map()} | {error, term()}}]) -> info().
summarize(Tab, Answers) when is_atom(Tab), Tab =/= all -> summarize([Tab], Answers);
summarize(Tabs, Answers) ->
    Nodes = maps:from_list([{N, node_view(A)} || {N, A} <- Answers]),
    Reports = [{N, R} || {N, {ok, R}} <- Answers],
    Names = lists:usort([T || {_, #{copies := Cs}} <- Reports, T <- maps:keys(Cs),
                              Tabs =:= all orelse lists:member(T, Tabs)]),
    Tables = maps:from_list([{T, table_view(T, Answers)} || T <- Names]),
    #{converged => lists:all(fun({_, A}) -> element(1, A) =:= ok end, Answers)
          andalso lists:all(fun(#{converged := C}) -> C end, maps:values(Tables)),
      nodes => Nodes, tables => Tables}.

node_view({error, Why}) -> #{status => Why};
node_view({ok, #{membership := M, mnesia := Mn, copies := Cs}}) ->
    Copies = [C || C = #{} <- maps:values(Cs)],
    Heals = [H || #{last_heal := H = #{}} <- Copies],
    View = case M of
               #{} -> maps:with([connected, running, members, mnesia_rejoins, partitions_seen,
                                 last_partition, backoff_ms], M);
               _ -> #{}
           end,
    View#{status => up, mnesia => Mn,
          last_heal => case Heals of
                           [] -> undefined;
                           _ -> lists:last(lists:sort(fun(A, B) -> time(A) =< time(B) end, Heals))
                       end}.

time(#{time := T}) -> T;
time(_) -> 0.

%% One table: every member that holds a copy (by the answers' member lists) and its state.
table_view(Tab, Answers) ->
    Copies0 = [{N, C} || {N, {ok, #{copies := #{Tab := C}}}} <- Answers],
    Members = lists:usort(lists:append([Ms || {_, #{members := Ms}} <- Copies0])
                          ++ [N || {N, _} <- Copies0]),
    Answered = maps:from_list(Answers),
    Ok = [{N, C} || {N, C = #{delivered := _}} <- Copies0],
    Top = lists:foldl(fun({_, #{delivered := D}}, Acc) -> hm_vv:join(D, Acc) end, hm_vv:new(), Ok),
    Copies = maps:from_list(
               [{N, copy_view(N, proplists:get_value(N, Copies0), Answered, Top)} || N <- Members]),
    Ready = [C || C = #{status := ready} <- maps:values(Copies)],
    Same = fun(K) -> length(lists:usort([maps:get(K, C) || C <- Ready])) =< 1 end,
    Pending = [{N, S} || {N, #{status := S}} <- maps:to_list(Copies), S =/= ready]
        ++ [{N, buffered} || {N, #{status := ready, buffered_ops := B}} <- maps:to_list(Copies),
                             B > 0]
        ++ [vectors_differ || not Same(delivered)]
        ++ [digests_differ || not Same(digest)],
    #{converged => Ready =/= [] andalso Pending =:= [], members => Members,
      pending => Pending, copies => Copies}.

copy_view(_N, C = #{delivered := D, stable := S}, _, Top) ->
    (maps:with([status, size, buffered_ops, unstable_ops, unstable_keys, queued_ops, digest,
                delivered, reachable, partitions_seen, last_partition, catching_up, last_heal,
                last_state_transfer, metadata_words, sync_waiting], C))
        #{lag => behind(D, Top), stability_lag => behind(S, D)};
copy_view(N, Other, Answered, _) ->
    Why = case {Other, maps:get(N, Answered, {error, unreachable})} of
              {{error, W}, _} -> W;                       % the copy's process did not answer
              {undefined, {error, W}} -> W;               % the member did not answer
              {undefined, {ok, _}} -> no_copy             % it answered without this copy
          end,
    #{status => Why}.

%% How many operations `V' lacks of `Top'.
behind(V, Top) -> lists:sum([max(0, N - hm_vv:get(R, V)) || {R, N} <- hm_vv:to_list(Top)]).
