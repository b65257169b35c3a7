%% @doc The process of one copy of a fragment of a partitioned EC table created with
%% `{replication, dotted}': a thin shell around the DottedDB core {@link hm_dotted} (*DottedDB:
%% Anti-Entropy without Merkle Trees, Deletes without Tombstones*, §IV), with the table
%% operations of {@link hm_dotted_table}. It holds the copy's state, feeds it client
%% requests, peers' messages and its own timers, and carries out the effects: sends to the
%% other copies' processes, timers, and `show' mirrored into the fragment's Mnesia table (a
%% `bag', written through {@link hm_ec_mnesia} like every EC table), so that `async_ec'
%% reads and Mnesia's dirty reads work unchanged.
%%
%% It stands in for {@link hm_ec_table_server} on dotted fragments: the table's EC options
%% name this module (`server'), {@link hm_ec_table_sup} starts it, {@link hm_ec_server}
%% tracks it, tells it the copy holders and passes writes to it; it is registered under
%% {@link hm_ec_table_server:name/1} of the fragment and answers the same calls (`submit',
%% `info', `status', `queued', the `members' cast). An `async' write is answered once it is
%% applied here and sent to the other copies; a `sync' one (`sync_ec') once every other copy
%% reachable then holds the dots it made ({@link hm_dotted_table:made/3}), as `sync_ec' waits
%% on any EC table: a copy that disconnects stops being waited for, and past 30 s the answer
%% is `{error, {sync_timeout, Nodes}}' (the write stays applied). A process of its own asks
%% the copies, so this one goes on serving them meanwhile.
%%
%% The state lives in this process only: a copy is a `ram_copies' copy, and every start of
%% the process is a new incarnation of the node's copy, with the id `{Node, Incarnation}'
%% (the system time in microseconds, above any incarnation of this node a reachable copy
%% knows). Its dots never collide with those of an earlier life; the other copies learn the
%% new id from its first message, and retire the old one as they retire a replaced copy's
%% ({@link hm_dotted}, "Churn"). A copy starting while another holder's copy is ready (a
%% restart, Mnesia restarted on this node, a new copy of a fragment that moves) starts as
%% `bootstrap' and takes the state of a peer before it accepts writes (they are passed to
%% another holder meanwhile). One that starts while no other copy is reachable and ready
%% starts empty and ready; the first copy it exchanges clocks with sees that it lacks dots
%% every copy had, and answers with its whole state. The copy holders the EC server reports
%% become the group ({@link hm_dotted:set_peers/2}, by node); `info' gives the node clock's
%% bases as `delivered', keyed by copy id `{Node, Incarnation}', so that a pool change
%% removes a copy only once the others hold every dot it made.
%%
%% Peers' messages are `{hm_dotted, Cookie, Msg}' with the fragment's Mnesia cookie, so that
%% a table deleted and created again under the same name never takes the old one's
%% messages; they are sent without connecting (anti-entropy repairs what a cut lost).
%%
%% Invariants: every `show' effect is in the Mnesia mirror before the next request is taken;
%% a write is refused (`{error, {syncing, Frag}}') until the copy is ready.
-module(hm_dotted_server).
-behaviour(gen_server).

-export([start_link/2, get/3, put/4, delete/4, is_dotted/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TIMEOUT, 10000).
-define(PROBE_MS, 2000).

%%% ---------------------------------------------------------------- API

%% @doc Start the process of dotted fragment `Frag' (its EC options, which name its
%% `anti_entropy' and intervals).
-spec start_link(atom(), map()) -> {ok, pid()} | {error, term()}.
start_link(Frag, EcOpts) ->
    gen_server:start_link({local, hm_ec_table_server:name(Frag)}, ?MODULE, {Frag, EcOpts}, []).

%% @doc Whether `Tab' is a partitioned table with `{replication, dotted}'.
-spec is_dotted(atom()) -> boolean().
is_dotted(Tab) ->
    case hm_partition:properties(Tab) of
        {ok, #{replication := dotted}} -> true;
        _ -> false
    end.

%% @doc GET (Algorithm 1) of a dotted table: the replies of `R' copies of the key's
%% fragment (this node's first) merged into the records and an opaque context. Errors:
%% `{insufficient_replicas, R, Answered}'.
-spec get(atom(), term(), pos_integer()) -> {ok, [tuple()], binary()} | {error, term()}.
get(Tab, Key, R) ->
    Frag = hm_ec_frag:fragment_table(Tab, Key),
    case fetch(sources(Frag), Frag, Key, R, []) of
        {ok, Replies} ->
            {Values, Ctx} = hm_dotted:merge_replies(Replies),
            {ok, Values, Ctx};
        {error, _} = E -> E
    end.

%% @doc PUT (Algorithm 1) on a dotted table, at the first reachable copy of the key's
%% fragment (this node's first): `Record' supersedes the versions `Context' names
%% (`undefined': every version that copy has seen). `W' copies must be reachable, and the
%% write is acknowledged once `W' copies hold its dot (that copy applied it and sent it to
%% the others; with `W' > 1 the other copies are asked until `W' hold it, for 10 s at
%% most). Errors: `{bad_context, Context}', `{insufficient_replicas, W, Reachable}' (before
%% writing), `{insufficient_replicas, W, Holding}' (the write is applied, but only
%% `Holding' copies were seen to hold it in time), `{unavailable, Reason}' (no reachable
%% copy took the write: each was catching up, or did not answer; `Reason' is the last one's).
-spec put(atom(), tuple(), binary() | undefined, pos_integer()) -> ok | {error, term()}.
put(Tab, Record, Context, W) ->
    write(Tab, element(2, Record), {v, Record}, Context, W).

%% @doc DELETE (Algorithm 1) on a dotted table: the versions `Context' names go (versions it
%% does not name stay); nothing is left of the key once the delete is stripped. As
%% {@link put/4}.
-spec delete(atom(), term(), binary() | undefined, pos_integer()) -> ok | {error, term()}.
delete(Tab, Key, Context, W) -> write(Tab, Key, delete, Context, W).

write(Tab, Key, What, Context, W) ->
    Frag = hm_ec_frag:fragment_table(Tab, Key),
    case sources(Frag) of
        Ss when length(Ss) < W -> {error, {insufficient_replicas, W, length(Ss)}};
        Ss ->
            case write_at(Ss, Frag, {kv, Key, What, Context}, none) of
                {ok, _Dot} when W =< 1 -> ok;
                {ok, Dot} -> wait_holding(Frag, Dot, W, deadline());
                {error, _} = E -> E
            end
    end.

deadline() -> erlang:monotonic_time(millisecond) + ?TIMEOUT.

%% Until `W' reachable copies hold `Dot' (each asked again every 20 ms, until `Deadline').
wait_holding(Frag, Dot, W, Deadline) ->
    Holding = length([N || N <- sources(Frag), holds(N, Frag, Dot)]),
    case Holding >= W of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) < Deadline of
                true -> timer:sleep(20), wait_holding(Frag, Dot, W, Deadline);
                false -> {error, {insufficient_replicas, W, Holding}}
            end
    end.

holds(N, Frag, Dot) ->
    try gen_server:call({hm_ec_table_server:name(Frag), N}, {holds, Dot}, ?TIMEOUT) of
        Held -> Held =:= true
    catch exit:_ -> false
    end.

%% A `sync' write's answer: `ok' once every copy in `Peers' that is still connected holds
%% `Made' (asked every 20 ms), `{error, {sync_timeout, Nodes}}' after 30 s; from a process
%% of its own.
await_held(From, _Frag, [], _Peers) -> gen_server:reply(From, ok);
await_held(From, _Frag, _Made, []) -> gen_server:reply(From, ok);
await_held(From, Frag, Made, Peers) ->
    Deadline = erlang:monotonic_time(millisecond) + hm_ec_table:sync_timeout_ms(),
    _ = spawn(fun() -> gen_server:reply(From, held_by(Frag, Made, Peers, Deadline)) end),
    ok.

held_by(Frag, Made, Peers, Deadline) ->
    Lacking = [N || N <- Peers, lists:member(N, nodes()), not holds(N, Frag, Made)],
    case {Lacking, erlang:monotonic_time(millisecond) < Deadline} of
        {[], _} -> ok;
        {_, true} -> timer:sleep(20), held_by(Frag, Made, Lacking, Deadline);
        {_, false} -> {error, {sync_timeout, Lacking}}
    end.

write_at([], _Frag, _Req, Last) -> {error, {unavailable, Last}};
write_at([N | Ns], Frag, Req, _Last) ->
    try gen_server:call({hm_ec_table_server:name(Frag), N}, Req, ?TIMEOUT) of
        {ok, Dot} -> {ok, Dot};
        {error, {bad_context, _}} = E -> E;
        {error, Why} -> write_at(Ns, Frag, Req, Why)
    catch exit:Why -> write_at(Ns, Frag, Req, Why)
    end.

%% This node first when it holds a copy, then the reachable holders.
sources(Frag) ->
    [node() || hm_ec_frag:is_local(Frag)] ++ (hm_ec_frag:holders(Frag) -- [node()]).

fetch(_Sources, _Frag, _Key, R, Acc) when length(Acc) >= R -> {ok, Acc};
fetch([], _Frag, _Key, R, Acc) -> {error, {insufficient_replicas, R, length(Acc)}};
fetch([N | Ns], Frag, Key, R, Acc) ->
    try gen_server:call({hm_ec_table_server:name(Frag), N}, {fetch, Key}, ?TIMEOUT) of
        {ok, Reply} -> fetch(Ns, Frag, Key, R, [Reply | Acc]);
        _ -> fetch(Ns, Frag, Key, R, Acc)
    catch exit:_ -> fetch(Ns, Frag, Key, R, Acc)
    end.

%%% ---------------------------------------------------------------- gen_server

-spec init({atom(), map()}) -> {ok, map()}.
init({Frag, EcOpts}) ->
    ok = hm_ec_mnesia:open(Frag),
    %% the mirror of a copy that starts holds nothing yet: what the state shows is written
    %% back as the copy learns it
    _ = [ok = hm_ec_mnesia:delete(Frag, K) || K <- mnesia:dirty_all_keys(Frag)],
    Members = hm_ec_server:copy_holders(Frag),
    Cookie = mnesia:table_info(Frag, cookie),
    %% the copies are asked one at a time, up to the first ready one (a busy copy may take
    %% the whole probe time to answer)
    Infos = probe(Members -- [node()], Frag),
    Bootstrap = lists:any(fun(#{status := St}) -> St =:= ready end, Infos),
    %% above any incarnation of this node a reachable copy knows (the system time may have
    %% gone back since the last start)
    Known = [hm_dotted:incarnation(Id) || #{ids := Ids} <- Infos, Id <- Ids,
                                          hm_dotted:address(Id) =:= node()],
    Inc = lists:max([erlang:system_time(microsecond) | [K + 1 || K <- Known]]),
    Opts = maps:merge(maps:with([anti_entropy, strip_interval, sync_interval], EcOpts),
                      #{id => {node(), Inc}, peers => Members, bootstrap => Bootstrap,
                        seed => erlang:phash2({node(), erlang:unique_integer(),
                                               erlang:system_time()})}),
    {D, Effs} = hm_dotted:new(Opts),
    logger:info("hypermnesia: dotted copy of ~p on this node, incarnation ~p (bootstrap: ~p)",
                [Frag, Inc, Bootstrap]),
    {ok, run(Effs, #{tab => Frag, d => D, cookie => Cookie, drops => #{}})}.

probe([], _Frag) -> [];
probe([N | Ns], Frag) ->
    case peer_info(N, Frag) of
        none -> probe(Ns, Frag);
        I = #{status := ready} -> [I];
        I -> [I | probe(Ns, Frag)]
    end.

%% the info of the dotted copy on node N, `none' if it does not answer
peer_info(N, Frag) ->
    try lists:member(N, nodes()) andalso
            gen_server:call({hm_ec_table_server:name(Frag), N}, info, ?PROBE_MS) of
        I = #{replication := dotted, status := _, ids := _} -> I;
        _ -> none
    catch exit:_ -> none
    end.

-spec handle_call(term(), gen_server:from(), map()) ->
          {reply, term(), map()} | {stop, normal, term(), map()}.
handle_call({submit_after, _After, KeyOp, Mode}, From, S) ->
    %% a write passed on by a node without a ready copy (hm_ec_server): under DottedDB a
    %% key's writes are ordered by the contexts they carry, not by a causal broadcast, so
    %% there is no session to wait for and no dot of the broadcast to give back
    case handle_call({submit, KeyOp, Mode}, From, S) of
        {reply, ok, S1} -> {reply, {ok, none}, S1};
        Other -> Other
    end;
handle_call({submit, KeyOp, Mode}, From, S = #{tab := Tab, d := D}) ->
    case hm_dotted:status(D) of
        syncing -> {reply, {error, {syncing, Tab}}, S};
        ready ->
            case hm_dotted_table:apply_op(KeyOp, D) of
                {error, _} = E -> {reply, E, S};
                {D1, Effs} ->
                    case {Mode, applied(ok, Effs, S#{d := D1})} of
                        {sync, {reply, ok, S1}} ->
                            Made = hm_dotted_table:made(hm_dotted:id(D), hm_dotted:node_clock(D),
                                                        hm_dotted:node_clock(D1)),
                            Peers = [N || N <- members(D1), lists:member(N, nodes())],
                            await_held(From, Tab, Made, Peers),
                            {noreply, S1};
                        {_, Reply} -> Reply
                    end
            end
    end;
handle_call({kv, Key, What, Ctx0}, _From, S = #{tab := Tab, d := D}) ->
    Ctx = case Ctx0 of
              undefined -> element(2, hm_dotted:get(Key, D));
              _ -> Ctx0
          end,
    Result = case {hm_dotted:status(D), What} of
                 {syncing, _} -> {error, {syncing, Tab}};
                 {ready, {v, Rec}} -> hm_dotted:put(Key, Rec, Ctx, D);
                 {ready, delete} -> hm_dotted:delete(Key, Ctx, D)
             end,
    case Result of
        {error, bad_context} -> {reply, {error, {bad_context, Ctx0}}, S};
        {error, _} = E -> {reply, E, S};
        {D1, Effs} ->
            %% the write's dot: the next one of this copy
            {Dot, _} = hm_node_clock:next_dot(hm_dotted:id(D), hm_dotted:node_clock(D)),
            applied({ok, Dot}, Effs, S#{d := D1})
    end;
handle_call({holds, Dots}, _From, S = #{d := D}) when is_list(Dots) ->
    NC = hm_dotted:node_clock(D),
    {reply, lists:all(fun(Dot) -> hm_node_clock:contains(Dot, NC) end, Dots), S};
handle_call({holds, Dot}, _From, S = #{d := D}) ->
    {reply, hm_node_clock:contains(Dot, hm_dotted:node_clock(D)), S};
handle_call({fetch, Key}, _From, S = #{d := D}) ->
    case hm_dotted:status(D) of
        ready -> {reply, {ok, hm_dotted:fetch(Key, D)}, S};
        syncing -> {reply, {error, syncing}, S}
    end;
handle_call(info, _From, S) ->
    {reply, info(S), S};
handle_call(status, _From, S = #{d := D}) ->
    %% the shape of an EC table copy's status (hm_status compares copies by it), the digest
    %% of the rows shown
    Rows = lists:append(maps:values(hm_dotted:values(D))),
    {reply, (info(S))#{queued_ops => 0, buffered_ops => 0, digest => hm_ec_watch:digest(Rows)},
     S};
handle_call(queued, _From, S) ->
    {reply, 0, S};
handle_call(Req, _From, S) ->
    {reply, {error, {unknown_request, Req}}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast({members, Ms}, S = #{d := D}) when is_list(Ms) ->
    case lists:usort(Ms) =:= members(D) orelse not lists:member(node(), Ms) of
        true -> {noreply, S};
        false ->
            {D1, Effs} = hm_dotted:set_peers(Ms, D),
            {noreply, run(Effs, S#{d := D1})}
    end;
handle_cast(Msg, S) ->
    {noreply, drop({unknown_cast, Msg}, S)}.

-spec handle_info(term(), map()) -> {noreply, map()} | {stop, normal, map()}.
handle_info({hm_dotted, Cookie, Msg}, S = #{cookie := Cookie, d := D}) ->
    {D1, Effs} = hm_dotted:handle(Msg, D),
    case applied(ok, Effs, S#{d := D1}) of
        {reply, ok, S1} -> {noreply, S1};
        {stop, normal, _, S1} -> {stop, normal, S1}
    end;
handle_info({hm_dotted, _OtherCookie, _Msg}, S = #{tab := Tab}) ->
    {noreply, drop({other_instance, Tab}, S)};
handle_info({hm_dotted_timer, What}, S = #{d := D}) ->
    {D1, Effs} = hm_dotted:timeout(What, D),
    {noreply, run(Effs, S#{d := D1})};
handle_info(Msg, S) ->
    {noreply, drop({unknown_message, Msg}, S)}.

%%% ---------------------------------------------------------------- effects

%% A request applied to the state: its effects carried out and `Reply' given; when the
%% mirror cannot be written (the copy is being removed from this node, or Mnesia stops) the
%% request counts as not applied (a write is then passed to another copy) and the process
%% ends: the EC server starts it again if the copy is still here.
applied(Reply, Effs, S = #{tab := Tab}) ->
    try run(Effs, S) of
        S1 -> {reply, Reply, S1}
    catch Class:Reason ->
            logger:notice("hypermnesia: dotted copy of ~p stops: ~0p:~0p", [Tab, Class, Reason]),
            {stop, normal, {error, {not_applied, Reason}}, S}
    end.

run(Effs, S = #{tab := Tab, cookie := Cookie}) ->
    lists:foreach(fun({delete, Key}) -> ok = hm_ec_mnesia:delete(Tab, Key);
                     ({write, Rec}) -> ok = hm_ec_mnesia:write(Tab, Rec)
                  end, hm_dotted_table:mirror(Effs)),
    lists:foldl(fun({send, Peer, Msg}, Acc) ->
                        %% a copy is sent to at its node, whatever its incarnation there
                        _ = erlang:send({hm_ec_table_server:name(Tab), hm_dotted:address(Peer)},
                                        {hm_dotted, Cookie, Msg}, [noconnect, nosuspend]),
                        Acc;
                   ({timer, Ms, What}, Acc) ->
                        _ = erlang:send_after(Ms, self(), {hm_dotted_timer, What}),
                        Acc;
                   ({drop, Why}, Acc) -> drop({dotted, Why}, Acc);
                   (_, Acc) -> Acc
                end, S, Effs).

drop(What, S = #{drops := Ds}) -> S#{drops := hm_ec_table_server:log_drop(What, Ds)}.

%% `delivered' (and `stable'): the node clock's bases, keyed by copy id `{Node,
%% Incarnation}' as the broadcast keys its replicas, so that a pool change waits, before it
%% removes a copy, until the others hold every dot that copy made (hm_partition:caught_up/3)
%% and the cluster view compares copies as it does any EC table's. `ids': the copy ids of
%% the group as this copy knows them.
info(#{tab := Tab, d := D}) ->
    Meta = hm_dotted:metadata(D),
    Base = hm_node_clock:base(hm_dotted:node_clock(D)),
    #{table => Tab, type => pawset, conflict => siblings, replication => dotted,
      anti_entropy => hm_dotted:anti_entropy(D), status => hm_dotted:status(D),
      members => members(D), id => hm_dotted:id(D), ids => hm_dotted:peers(D),
      reachable => [N || N <- members(D), N =:= node() orelse lists:member(N, nodes())],
      size => maps:size(hm_dotted:values(D)), objects => maps:size(hm_dotted:objects(D)),
      non_stripped => length(hm_dotted:non_stripped(D)), metadata => Meta,
      node_clock => hm_dotted:node_clock(D), delivered => Base, stable => Base}.

%% the nodes of the group
members(D) -> lists:usort([hm_dotted:address(Id) || Id <- hm_dotted:peers(D)]).
